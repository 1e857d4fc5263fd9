"""One recorded backward pass: walk the graph, hook its nodes, run, collect.

Before the engine runs, every node of the graph gets a pre-hook (which records the execution
order) and a post-hook (which records the gradient leaving it through each input slot). The
slots that lead into a leaf's AccumulateGrad are that leaf's uses; the gradient through each is
that use's contribution, and together they make up what the pass adds to `.grad`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from app.format import clip

from .cuts import find_cuts
from .graph import Walk, walk
from .summary import norm_of, summarize

__all__ = ["BackwardRecording"]


class BackwardRecording:
    def __init__(self, *, index: int, call: str, line: int | None, outputs, script_path: str,
                 namer, storage_names: dict[int, str], guard: Callable, synthetic: bool = False,
                 max_nodes: int = 200_000, escapes_of: Callable | None = None,
                 create_graph: bool = False, budget=None) -> None:
        self.index = index
        self.call = call
        self.line = line
        self.synthetic = synthetic
        self._guard = guard  # context manager: our own tensor work is not the script's
        self.walk: Walk = walk(outputs, script_path=script_path, name_leaf=namer.name,
                               storage_names=storage_names, max_nodes=max_nodes)
        self.order: list[str] = []
        self.contributions: dict[str, list[dict]] = {}
        self._edge_grads: dict[tuple[str, int], dict] = {}
        self._handles: list[Any] = []
        self._budget = budget  # summary.ValueBudget: the run's numbers, shared
        self.create_graph = create_graph
        # create_graph=True: custom Function nodes whose backward returned a gradient with no
        # graph although the engine was building one (a tensor kept on ctx, not saved)
        self.cut_by: list[str] = []
        self._tracked = {name: t for name, (t, _kind) in namer.named().items()}
        for _node, (tensor, name) in self.walk.leaves.items():
            self._tracked.setdefault(name, tensor)
        with guard():
            self._before = {name: summarize(t.grad, budget=budget)
                            for name, t in self._tracked.items()}
        self._leaf_slots = self._slots_into_leaves()
        self.cuts = find_cuts(self.walk, self._tracked, escapes_of)
        self._hook_all()

    def _slots_into_leaves(self) -> dict[str, dict[int, str]]:
        """consumer node id -> {slot: leaf name} for every edge into an AccumulateGrad."""
        out: dict[str, dict[int, str]] = {}
        for e in self.walk.edges:
            leaf = self.walk.leaves.get(e["source"])
            if leaf is not None:
                out.setdefault(e["target"], {})[e["slot"]] = leaf[1]
        return out

    def _hook_all(self) -> None:
        for node_id, fn in self.walk.fns.items():
            self._handles.append(fn.register_prehook(self._pre(node_id)))
            if fn.next_functions:
                self._handles.append(fn.register_hook(self._post(node_id)))

    def _pre(self, node_id: str):
        def hook(grad_outputs):
            self.order.append(node_id)
        return hook

    def _post(self, node_id: str):
        leaf_slots = self._leaf_slots.get(node_id, {})
        watch_cut = self.create_graph and node_id in self.walk.customs

        def hook(grad_inputs, grad_outputs):
            if watch_cut and node_id not in self.cut_by and any(
                    g is not None and g.is_floating_point() and not g.requires_grad
                    for g in grad_inputs):
                self.cut_by.append(node_id)
            with self._guard():
                for slot, g in enumerate(grad_inputs):
                    if g is None:
                        continue
                    self._edge_grads[(node_id, slot)] = {"shape": list(g.shape),
                                                         "grad_norm": norm_of(g)}
                    leaf = leaf_slots.get(slot)
                    if leaf is not None:
                        self.contributions.setdefault(leaf, []).append(
                            {"node": node_id, "slot": slot,
                             "grad": summarize(g, budget=self._budget)})
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

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def finish(self, error: BaseException | None = None, results: Any = None) -> dict:
        """The event, once the engine has run (or failed)."""
        self.remove_hooks()
        with self._guard():
            grads = {name: {"before": self._before[name],
                            "after": summarize(t.grad, budget=self._budget)}
                     for name, t in self._tracked.items()}
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
        if result_summaries is not None:
            event["results"] = result_summaries
        if self.cut_by:
            event["cut_by"] = self.cut_by
        if error is not None:
            event["error"] = {"type": type(error).__name__, "message": clip(str(error).strip())}
        return event


def tensors_of(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []
