"""One recorded backward pass: walk the graph, hook its nodes, run, collect.

Before the engine runs, every node of the graph gets a pre-hook (which records the execution
order) and a post-hook (which records the gradient leaving it through each input slot). The
slots that lead into a leaf's AccumulateGrad are that leaf's uses; the gradient through each is
that use's contribution, and together they make up what the pass adds to `.grad`, unless the
script hooked the leaf: a hook (`register_hook`) changes the summed gradient on its way into
`.grad`, a post-accumulate-grad hook changes `.grad` itself. For such a leaf the pass keeps the
uses' sum, what reached its AccumulateGrad (a pre-hook of ours, which the engine runs after the
script's tensor hooks) and `.grad` before and after, and each difference is a share of its own
(`hooks`, with the hooks' lines), so that the uses and the shares add up to `.grad`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from app.format import clip

from .cuts import find_cuts
from .graph import Walk, walk
from .hooks import HookCalls
from .saved_memory import saved_memory
from .summary import EdgeNorms, Rounding, norm_of, summarize, summarize_many

MAX_RECOMPUTED = 2000  # module forwards a checkpoint ran again, per pass (the schema's bound)

__all__ = ["BackwardRecording"]


class BackwardRecording:
    def __init__(self, *, index: int, call: str, line: int | None, outputs, script_path: str,
                 namer, storage_names: dict[int, str], guard: Callable, synthetic: bool = False,
                 max_nodes: int = 200_000, escapes_of: Callable | None = None,
                 create_graph: bool = False, budget=None,
                 hooks_on: Callable[[torch.Tensor], list] | None = None,
                 module_hook_lines: list[int] | None = None,
                 nonleaf_inputs: list[tuple[torch.Tensor, str]] | None = None,
                 hook_target: Callable[[Any], str | None] | None = None) -> None:
        self.index = index
        self.call = call
        self.line = line
        self.synthetic = synthetic
        self._guard = guard  # context manager: our own tensor work is not the script's
        self.walk: Walk = walk(outputs, script_path=script_path, name_leaf=namer.name,
                               storage_names=storage_names, max_nodes=max_nodes)
        self.order: list[str] = []
        self.nested = 0  # backward passes torch ran inside this one (reentrant checkpoint)
        # (checkpoint frame or node, module path, class) of each module forward a checkpoint
        # ran again
        self._recomputed: list[tuple[Any, str, str]] = []
        self.contributions: dict[str, list[dict]] = {}
        self._edge_grads: dict[tuple[str, int], dict] = {}
        self._handles: list[Any] = []
        self._budget = budget  # summary.ValueBudget: the run's numbers, shared
        # the uses' values, rounded together when the pass ends (finish)
        self._rounding = Rounding()
        self._edge_norms = EdgeNorms()  # each edge's grad_norm, finished when the pass ends
        self.create_graph = create_graph
        # create_graph=True: custom Function nodes whose backward returned a gradient with no
        # graph although the engine was building one (a tensor kept on ctx, not saved)
        self.cut_by: list[str] = []
        self._tracked = {name: t for name, (t, _kind) in namer.named().items()}
        for _node, (tensor, name) in self.walk.leaves.items():
            self._tracked.setdefault(name, tensor)
        with guard():
            self._before = dict(zip(self._tracked, summarize_many(
                [t.grad for t in self._tracked.values()], budget=budget), strict=True))
        self._leaf_slots = self._slots_into_leaves(nonleaf_inputs or [])
        self.cuts = find_cuts(self.walk, self._tracked, escapes_of)
        # hooked leaves: node id -> (name, leaf, its hooks); their sums, kept as tensors
        self._hooked: dict[str, tuple[str, torch.Tensor, list]] = {}
        for node_id, (tensor, name) in self.walk.leaves.items():
            hooks = hooks_on(tensor) if hooks_on is not None else []
            if hooks:
                self._hooked[node_id] = (name, tensor, hooks)
        self._uses_sum: dict[str, torch.Tensor] = {}
        # what modules' full backward hooks changed on the way into a leaf that is a hooked
        # module's input: leaf name -> the change, summed over the pass
        self._module_hook_lines = sorted(module_hook_lines or ())
        self._module_changes: dict[str, torch.Tensor] = {}
        self._arrived: dict[str, torch.Tensor] = {}
        with guard():
            self._grad_before = {name: t.grad.detach().clone()
                                 for name, t, _ in self._hooked.values() if t.grad is not None}
        # every call of the script's own hooks in this pass (hooks.py counts them)
        self._hook_target = hook_target or (lambda reg: reg.on)
        self._node_ids: dict[int, str] | None = None
        self.hook_calls = HookCalls(self._node_id)
        self._hook_all()

    def _node_id(self, fn: Any) -> str | None:
        """The walked node that is `fn` (the engine's current node while a hook runs)."""
        if fn is None:
            return None
        if self._node_ids is None:  # built at the first hook call: most passes have none
            self._node_ids = {id(f): node_id for node_id, f in self.walk.fns.items()}
        return self._node_ids.get(id(fn))

    def _slots_into_leaves(self, nonleaf_inputs: list[tuple[torch.Tensor, str]]
                           ) -> dict[str, dict[int, str]]:
        """consumer node id -> {slot: leaf name} for every edge into an AccumulateGrad, and
        into the node of a computed tensor that `autograd.grad` is asked about (`x` in
        `grad(y, x)`, `x = leaf.clone()`): what reaches it along those edges is its result,
        summed by the engine, so its uses are counted as a leaf's are."""
        out: dict[str, dict[int, str]] = {}
        node_of = {fn: node_id for node_id, fn in self.walk.fns.items()}
        computed = {}  # node id -> [(which output of that node, name)]
        for tensor, name in nonleaf_inputs:
            node_id = node_of.get(tensor.grad_fn)
            if node_id is not None:
                computed.setdefault(node_id, []).append((tensor.output_nr, name))
        for e in self.walk.edges:
            leaf = self.walk.leaves.get(e["source"])
            if leaf is not None:
                out.setdefault(e["target"], {})[e["slot"]] = leaf[1]
            elif e["source"] in computed and e["target"] in self.walk.fns:
                # the consumer's edge names the output of the node it takes: only `x`'s own
                _fn, output = self.walk.fns[e["target"]].next_functions[e["slot"]]
                for wanted, name in computed[e["source"]]:
                    if output == wanted:
                        out.setdefault(e["target"], {})[e["slot"]] = name
        return out

    def _hook_all(self) -> None:
        for node_id, fn in self.walk.fns.items():
            self._handles.append(fn.register_prehook(self._pre(node_id)))
            if fn.next_functions:
                self._handles.append(fn.register_hook(self._post(node_id)))

    def _pre(self, node_id: str):
        hooked = self._hooked.get(node_id)

        def hook(grad_outputs):
            self.order.append(node_id)
            if hooked is not None and grad_outputs and grad_outputs[0] is not None:
                with self._guard():  # after the script's hooks: what goes into .grad
                    self._arrived[hooked[0]] = grad_outputs[0].detach().clone()
        return hook

    def _post(self, node_id: str):
        leaf_slots = self._leaf_slots.get(node_id, {})
        watch_cut = self.create_graph and node_id in self.walk.customs
        hooked_names = {name for name, _, _ in self._hooked.values()}
        # torch puts this identity node before a module whose full backward hook is set: the
        # gradient that leaves it is the hook's (it runs before this post-hook), the one that
        # came in is the module's own; into a leaf, the difference is the hook's share
        module_hook = type(self.walk.fns[node_id]).__name__ == "BackwardHookFunctionBackward"

        def hook(grad_inputs, grad_outputs):
            if watch_cut and node_id not in self.cut_by and any(
                    g is not None and g.is_floating_point() and not g.requires_grad
                    for g in grad_inputs):
                self.cut_by.append(node_id)
            # past every __torch_function__: each edge's shape and dtype went through the
            # recorder's mode (busy, it hands them straight back), two calls an edge
            with self._guard(), torch._C.DisableTorchFunction():
                for slot, g in enumerate(grad_inputs):
                    if g is None:
                        continue
                    edge = {"shape": list(g.shape), "dtype": str(g.dtype).removeprefix("torch.")}
                    self._edge_grads[(node_id, slot)] = edge
                    leaf = leaf_slots.get(slot)
                    if leaf is None:
                        self._edge_norms.norm_into(edge, g)
                    else:
                        came = grad_outputs[slot] if module_hook and slot < len(
                            grad_outputs) else None
                        changed = isinstance(came, torch.Tensor) and came.shape == g.shape \
                            and not _same(g, came)
                        if changed:
                            kept = self._module_changes.get(leaf)
                            change = g.detach() - came.detach()
                            self._module_changes[leaf] = change if kept is None else kept + change
                        use = came if changed else g  # the module's own, before its hook
                        summary = summarize(use, budget=self._budget, rounding=self._rounding)
                        self.contributions.setdefault(leaf, []).append(
                            {"node": node_id, "slot": slot, "grad": summary})
                        if use is g and summary is not None and "norm" in summary:
                            # the same gradient's norm, from the summary's float64 pass: a
                            # weight's edge no longer reads its gradient twice
                            edge["grad_norm"] = summary["norm"]
                        else:
                            self._edge_norms.norm_into(edge, g)
                        # what reaches the leaf's own hooks: after the module's hook (its
                        # share is counted above, not again as theirs); a copy, since a hook
                        # may change g in place
                        if leaf in hooked_names:
                            kept = self._uses_sum.get(leaf)
                            self._uses_sum[leaf] = g.detach().clone() if kept is None \
                                else kept + g.detach()
        return hook

    def _in_forward_order(self) -> None:
        """Each parameter's uses as the forward pass made them (use 1 is the first time the
        script applied it), not as the engine ran them, which is roughly the reverse. A node's
        sequence number counts the nodes autograd made before it in this thread; two uses by
        one node (w * w) go by input slot."""
        fns = self.walk.fns

        def made(c: dict) -> tuple[float, int]:
            try:
                return fns[c["node"]]._sequence_nr(), c["slot"]
            except (KeyError, AttributeError, RuntimeError):
                return float("inf"), c["slot"]  # no number: after the numbered ones

        for uses in self.contributions.values():
            uses.sort(key=made)

    def note_recomputed(self, checkpoint: Any, module: str, cls: str) -> None:
        """A module forward a checkpoint ran again during this pass (recorder.py finds which)."""
        if len(self._recomputed) < MAX_RECOMPUTED:
            self._recomputed.append((checkpoint, module, cls))

    def _recomputed_forwards(self) -> list[dict]:
        """Each module forward run again, with its region: a non-reentrant checkpoint's number
        in this pass's graph, or a reentrant one's CheckpointFunctionBackward node."""
        nodes = {id(fn): node_id for node_id, fn in self.walk.fns.items()}
        out = []
        for checkpoint, module, cls in self._recomputed:
            entry: dict[str, Any] = {"module": clip(module, 1000), "type": clip(cls, 1000)}
            index = self.walk.checkpoint_index(checkpoint)
            node_id = nodes.get(id(checkpoint))
            if index is not None:
                entry["checkpoint"] = index
            elif node_id is not None and self.walk.fns[node_id] is checkpoint:
                entry["node"] = node_id
            out.append(entry)
        return out

    def _hook_shares(self) -> dict[str, list[dict]]:
        """For each hooked leaf, what its hooks changed: the tensor hooks, between the uses'
        sum and what reached AccumulateGrad; the post-accumulate-grad hooks, between that
        added to .grad and .grad after. Only a change that is there is a share."""
        out: dict[str, list[dict]] = {}
        with self._guard():
            for name, change in self._module_changes.items():
                out[name] = [{"kind": "module backward hook", "lines": self._module_hook_lines,
                              "grad": summarize(change, budget=self._budget)}]
            for name, tensor, hooks in self._hooked.values():
                arrived, uses = self._arrived.get(name), self._uses_sum.get(name)
                # torch.autograd.grad runs the leaf's tensor hooks on what it returns, and no
                # AccumulateGrad: the result is what arrived, and nothing is added to .grad
                returned = arrived is None and name in self._returned
                if returned:
                    arrived = self._returned[name]
                if arrived is None or uses is None:
                    continue  # the engine did not accumulate it (an error)
                shares = []
                lines = sorted({line for kind, line in hooks if kind == "hook" and line})
                if not _same(arrived, uses):
                    shares.append({"kind": "hook", "lines": lines,
                                   "grad": summarize(arrived - uses, budget=self._budget),
                                   "from_norm": norm_of(uses), "to_norm": norm_of(arrived)})
                if returned:
                    if shares:
                        out[name] = out.get(name, []) + shares
                    continue
                before = self._grad_before.get(name)
                added = arrived if before is None else before + arrived
                after = tensor.grad
                post = sorted({line for kind, line in hooks if kind != "hook" and line})
                if after is not None and after.shape == added.shape and not _same(after, added):
                    shares.append({"kind": "post-accumulate-grad hook", "lines": post,
                                   "grad": summarize(after.detach() - added,
                                                     budget=self._budget),
                                   "from_norm": norm_of(added), "to_norm": norm_of(after)})
                elif after is None and post and bool(added.ne(0).any()):
                    # the hook took the gradient away (an optimizer stepped in backward, then
                    # zero_grad()): what the uses added went into the step, not into .grad
                    shares.append({"kind": "post-accumulate-grad hook", "lines": post,
                                   "grad": summarize(-added, budget=self._budget),
                                   "from_norm": norm_of(added), "to_norm": 0.0})
                if shares:
                    out[name] = out.get(name, []) + shares
        return out

    def _node_name(self, node_id: str) -> str | None:
        fn = self.walk.fns.get(node_id)
        return type(fn).__name__ if fn is not None else None

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def finish(self, error: BaseException | None = None, results: Any = None,
               inputs: list[torch.Tensor] | None = None) -> dict:
        """The event, once the engine has run (or failed). `results`: what torch.autograd.grad
        returned for its `inputs`, in their order."""
        self.remove_hooks()
        with self._guard(), torch._C.DisableTorchFunction():  # as the post-hooks' work is
            self._rounding.round()
            self._edge_norms.finish()
        self._returned = _returned_to_hooked(self._hooked.values(), results, inputs)
        with self._guard(), torch._C.DisableTorchFunction():
            after = summarize_many([t.grad for t in self._tracked.values()],
                                   budget=self._budget)
            grads = {name: {"before": self._before[name], "after": summary}
                     for name, summary in zip(self._tracked, after, strict=True)}
            result_summaries = None
            if results is not None:
                result_summaries = [summarize(r, budget=self._budget) for r in results]
        for e in self.walk.edges:
            info = self._edge_grads.get((e["target"], e["slot"]))
            if info is not None:
                e.update(info)
        self._in_forward_order()
        uses: dict[str, int] = {}
        for slots in self._leaf_slots.values():
            for leaf in slots.values():
                uses[leaf] = uses.get(leaf, 0) + 1
        graph = self.walk.document()
        graph["cuts"] = self.cuts
        # a leaf whose .grad changed with no use recorded: its gradient came through a backward
        # that torch ran inside this one (a reentrant checkpoint's, a hook's), not drawn
        inner = [name for name in self._tracked
                 if self.nested and not self.walk.truncated
                 and name not in self.contributions and self.call != "torch.autograd.grad"
                 and grads[name]["after"] is not None
                 and grads[name]["after"] != grads[name]["before"]]
        # a leaf whose requires_grad was switched off after the forward: its AccumulateGrad
        # drops what its uses sent (autograd.grad returns gradients and accumulates none)
        dropped = [name for name in self.contributions
                   if self.call != "torch.autograd.grad" and name in self._tracked
                   and not self._tracked[name].requires_grad]
        event = {
            "kind": "backward",
            "index": self.index,
            "call": self.call,
            "line": self.line,
            "synthetic": self.synthetic,
            "graph": graph,
            "order": self.order,
            "uses": uses,
            "contributions": self.contributions,
            "grads": grads,
            "error": None,
        }
        shares = self._hook_shares()
        if shares:
            event["hooks"] = shares
        calls = self.hook_calls.records(self._hook_target, self._node_name)
        if calls:
            event["hook_calls"] = calls
        if dropped:
            event["dropped"] = dropped
        if inner:
            event["inner"] = inner
        if self.nested:
            event["nested"] = self.nested
        if (recomputed := self._recomputed_forwards()):
            event["recomputed"] = recomputed
        if (memory := saved_memory(graph["nodes"], graph.get("checkpoints", ()))) is not None:
            event["saved_memory"] = memory
        if result_summaries is not None:
            event["results"] = result_summaries
        if self.cut_by:
            event["cut_by"] = self.cut_by
        if error is not None:
            event["error"] = {"type": type(error).__name__, "message": clip(str(error).strip())}
        return event


def _returned_to_hooked(hooked, results: Any, inputs: list[torch.Tensor] | None
                       ) -> dict[str, torch.Tensor]:
    """What torch.autograd.grad returned for each hooked leaf among its inputs, by name."""
    if results is None or not inputs:
        return {}
    results = tensors_of(results) if not isinstance(results, (list, tuple)) else list(results)
    by_id = {id(t): i for i, t in enumerate(inputs)}
    out = {}
    for name, tensor, _hooks in hooked:
        i = by_id.get(id(tensor))
        if i is not None and i < len(results) and isinstance(results[i], torch.Tensor):
            out[name] = results[i].detach()
    return out


def tensors_of(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal as a hook-free pass would leave them (the uses' sum is added in another order
    than the engine adds it: a rounding apart is no change)."""
    try:
        return a.shape == b.shape and bool(torch.allclose(a.float(), b.float(), rtol=1e-5,
                                                          atol=1e-7, equal_nan=True))
    except RuntimeError:
        return True  # sparse or another layout: say nothing rather than something wrong
