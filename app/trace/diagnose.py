"""Findings a teacher would point at, each naming the parameters and nodes it concerns."""

from __future__ import annotations

from typing import Any

import torch

from app.format import clip
from app.format import diagnostic as _diag
from app.format.flow import gradient_flow, steep_flow

from .grad_carryover import carryover_findings
from .gradcheck_events import gradcheck_findings
from .recorder import Recorder

__all__ = ["diagnose", "flow_findings"]

_NO_GRAD_FN = "does not require grad and does not have a grad_fn"


def _lines(escapes) -> str:
    by_how: dict[str, list[int]] = {}
    for e in escapes:
        by_how.setdefault(e.how, []).append(e.line)
    parts = []
    for how, lines in by_how.items():
        where = ", ".join(str(n) for n in sorted(set(lines)))
        label = {".data": "through `.data`", "detach()": "through `detach()`",
                 "no_grad": "under `torch.no_grad()`",
                 "requires_grad_(False)": "after `requires_grad_(False)`",
                 "requires_grad = False": "after `requires_grad = False`",
                 "inference_mode": "under `torch.inference_mode()`"}[how]
        parts.append(f"{label} (line {where})")
    return "; ".join(parts)


def _not_drawn(line: int | None, calls: list[str]) -> str:
    """One line's calls that compute gradients this tracer does not draw, said plainly."""
    where = f"at line {line}" if line else "in the script"
    names = set(calls)
    if names == {"torchviz.make_dot_from_trace"}:
        return (f"`torchviz.make_dot_from_trace` {where}: not drawn (it draws a TorchScript "
                "trace, not the autograd graph; `make_dot` on the output is drawn).")
    if names <= {"torch.autograd.gradcheck", "torch.autograd.gradgradcheck"}:
        checks = " and ".join(f"`{c}`" for c in sorted(names))
        return (f"{checks} {where}: checked, not drawn (a check is drawn as one "
                "representative pass of the function it checks, for the first few checks of a "
                "run while it still records backward passes; this is past those, or gave "
                "nothing to differentiate).")
    if {"torch.func.vmap", "torch.func.grad"} <= names or {"torch.vmap", "torch.func.grad"} \
            <= names:
        what = "per-sample gradients via `torch.func.vmap(grad(...))`"
    elif any(c.startswith("torch.autograd.forward_ad") for c in calls):
        what = "forward-mode AD (`torch.autograd.forward_ad`)"
    else:
        what = ", ".join(f"`{c}`" for c in calls)
    why = ("forward mode builds no backward graph" if "forward-mode" in what else
           "torch's own backward passes are not drawn"
           if all(c.startswith("torch.autograd.functional") for c in calls) else
           "torch.func transforms leave no grad_fn graph to record")
    return f"{what} {where}: computed, not drawn ({why})."


def _copied_template(line: int, names: list[str], trained: dict[str, str]) -> dict:
    """Parameters that were deep-copied and never used themselves: the template a container
    copies (nn.TransformerEncoder(layer, N) makes N copies of `layer`), said once, naming where
    the copies that train (`trained`, found through deepcopy's memo) live."""
    parts = [n.split(".") for n in names]
    common = []
    for column in zip(*parts, strict=False):
        if len(set(column)) != 1:
            break
        common.append(column[0])
    owner = ".".join(common[:-1] if len(names) == 1 else common)
    what = (f"`{owner}`'s {len(names)} parameters" if owner and len(names) > 1 else
            ", ".join(f"`{n}`" for n in names[:3]) + (" ..." if len(names) > 3 else ""))
    prefix = owner + "." if owner else ""
    homes = sorted({_numbered(copy[:-len(original) + len(prefix)].rstrip("."))
                    for copy, original in trained.items()
                    if original in names and copy.endswith(original[len(prefix):])} - {""})
    if homes:
        said = ", ".join(f"`{c}`" for c in homes[:3]) + (" ..." if len(homes) > 3 else "")
        tail = (f"`{owner or names[0]}` is the template that line {line} copies "
                "(copy.deepcopy, as `nn.TransformerEncoder` and `nn.TransformerDecoder` do with "
                f"the layer they are given) and is never called itself; the copies in {said} "
                "are what train.")
    else:
        never = f"`{owner}` is never called" if owner else "they are never used"
        tail = (f"{never}, and line {line} copies it (copy.deepcopy) without any copy "
                "receiving a gradient either: no backward graph reaches them.")
    return _diag("no_gradient", "warning",
                 f"{what} require grad but receive no gradient: {tail}", params=sorted(names))


def _hook_changed(name: str, share: dict, index: int, passes: int, returned: bool) -> dict:
    lines = share["lines"]
    where = (f"at line {lines[0]}" if len(lines) == 1 else
             "at lines " + ", ".join(map(str, lines)) if lines else "in the script")
    what = {"hook": "a hook", "module backward hook": "a module's full backward hook"}.get(
        share["kind"], "a post-accumulate-grad hook")
    norms = ""
    if share.get("from_norm") is not None and share.get("to_norm") is not None:
        norms = f" from norm {share['from_norm']:.4g} to {share['to_norm']:.4g}"
    more = f" (and in {passes - 1} more backward passes)" if passes > 1 else ""
    # torch.autograd.grad runs a leaf's tensor hooks on the gradient it returns, and fills no
    # .grad
    into = {"hook": "before torch.autograd.grad returned it" if returned else
            "on its way into `.grad`",
            "module backward hook": "as it left the module (its grad_input)"}.get(
        share["kind"], "after it was added to `.grad`")
    total = "what torch.autograd.grad returns" if returned else "`.grad`"
    return _diag("hook_changed", "info",
                 f"{what.capitalize()} registered {where} changed the gradient of `{name}`"
                 f"{norms} {into} in backward #{index}{more}: its uses no longer sum to "
                 f"{total} by themselves, and the hook's change is drawn as a share of its own.",
                 params=[name], event=index)


def _legacy_module_hook(call: dict, index: int) -> dict:
    """`register_backward_hook` sits on the node that made the module's output (torch's
    `_call_impl` registers it on that grad_fn), so its grad_input are that node's gradients for
    its own inputs; torch warns that it "will be missing some grad_input" when the forward
    made more than one node."""
    on = f" on `{call['on']}`" if call.get("on") else ""
    where = f" (line {call['line']})" if call.get("line") else ""
    node = call["sits_on"]
    return _diag("legacy_module_hook", "warning",
                 f"`register_backward_hook`{on}{where} sits on the operation that made the "
                 f"module's output, {node}, not on the module: its grad_input is what {node} "
                 "computes for that operation's own inputs (which may include a parameter's and "
                 "leave out the inputs of earlier operations), not necessarily the gradients of "
                 "the module's inputs. PyTorch deprecates it (with more than one operation in "
                 "the forward, \"this hook will be missing some grad_input\"); "
                 "`register_full_backward_hook` gives the gradients of the module's inputs.",
                 nodes=call["nodes"][:1], event=index)


def _touched(recorder: Recorder, t: torch.Tensor) -> bool:
    """Did the traced code touch `t`: use it in an operation with grad on, read its values,
    cut or copy it, or call a module that holds it?"""
    return recorder.first_use_with_grad(t) is not None or bool(recorder.escapes_of(t)) or \
        bool(recorder.cuts_above(t)) or recorder.cut_log.copied_at(t) is not None or \
        recorder.namer.in_called_module(t)


def _numbered(module: str) -> str:
    """`model.layers.3` as `model.layers.N`: one name for a stack of copies."""
    return ".".join("N" if part.isdigit() else part for part in module.split("."))


def diagnose(recorder: Recorder, events: list[dict], named: dict[str, tuple[torch.Tensor, str]],
             custom_results: dict[str, dict], shared_namespace: bool = False) -> list[dict]:
    """`shared_namespace`: the code ran among names it did not make (a kernel's, whose earlier
    cells hold models this one may never touch): a parameter the code never used, read or
    copied, of no module it called, is not said to have missed a gradient. PyTorch leaves its
    .grad as it was (None when nothing ever used it), which the parameters' table shows."""
    out: list[dict] = []
    backward_events = [e for e in events if e["kind"] == "backward"]

    # Parameters that require grad but never got one.
    if backward_events:
        in_graph = {name for e in backward_events for name in e["uses"]}
        copies: dict[int, list[str]] = {}  # line -> parameters only ever copied there
        trained: dict[str, str] = {}  # a copy the backward passes reached -> its original
        name_of = {id(t): name for name, (t, _kind) in named.items()}
        for name, (t, _kind) in named.items():
            if not t.requires_grad or name in in_graph or t.grad is not None:
                continue
            if shared_namespace and not _touched(recorder, t):
                continue
            nodes = [n["id"] for e in backward_events for n in e["graph"]["nodes"]
                     if any(s.get("param") == name for s in n.get("saved", ()))]
            escapes = recorder.escapes_of(t)
            cuts = [] if escapes else recorder.cuts_above(t)
            used = recorder.first_use_with_grad(t)
            if escapes and used is not None and all(x.line != used for x in escapes):
                # read without a graph somewhere, and used with one elsewhere: the use that
                # had a graph is the one that never reached a backward
                why = (f" It is used with grad on at line {used}, but no backward pass reached "
                       f"what it computed there (the script also reads it {_lines(escapes)}, "
                       "without a link to the graph).")
            elif escapes:
                why = (f" The script reads it {_lines(escapes)}, which hands out its values "
                       "without a link to the graph, so no gradient can flow back to it.")
            elif cuts:
                why = (f" A tensor computed from it leaves the graph {_lines(cuts)}, so no "
                       "gradient flows back past that point.")
            elif (copied := recorder.cut_log.copied_at(t)) is not None:
                copies.setdefault(copied, []).append(name)  # said once per copy, below
                if (copy := recorder.cut_log.copy_of(t)) is not None and \
                        id(copy) in name_of and name_of[id(copy)] in in_graph:
                    trained[name_of[id(copy)]] = name
                continue
            elif (used := recorder.first_use_with_grad(t)) is not None:
                why = (f" It is used with grad on at line {used}, but no backward pass reached "
                       "what it computed there.")
            else:
                why = " No backward graph reaches it."
            out.append(_diag("no_gradient", "warning",
                             f"`{name}` requires grad but received no gradient.{why}",
                             params=[name], nodes=sorted(set(nodes))))

        for line, names in copies.items():
            out.append(_copied_template(line, names, trained))

    # a hook on a leaf changes its gradient between its uses and .grad: said once per leaf
    # leaf -> (first share, its pass, passes, whether that pass returned it: autograd.grad)
    hooked: dict[str, tuple[dict, int, int, bool]] = {}
    for e in backward_events:
        for name, shares in (e.get("hooks") or {}).items():
            first = hooked.get(name)
            hooked[name] = (shares[0], e["index"], 1, name in (e.get("inputs") or ())) \
                if first is None else (first[0], first[1], first[2] + 1, first[3])
    for name, (share, index, passes, returned) in hooked.items():
        out.append(_hook_changed(name, share, index, passes, returned))

    # a legacy module backward hook runs on the node that made the module's output: said
    # once per hook, on that node of the first pass it ran in
    legacy_said: set[tuple[int | None, str | None]] = set()
    for e in backward_events:
        for call in e.get("hook_calls") or ():
            if call.get("sits_on") and (call["line"], call["on"]) not in legacy_said:
                legacy_said.add((call["line"], call["on"]))
                out.append(_legacy_module_hook(call, e["index"]))

    # one finding per parameter, not one per pass: a training loop would repeat it each time
    reused: dict[str, list[tuple[int, int, bool]]] = {}
    for e in backward_events:
        for name, k in e["uses"].items():
            if k > 1:
                returned = name in (e.get("inputs") or ())  # autograd.grad's, not .grad
                reused.setdefault(name, []).append((e["index"], k, returned))
    for name, found in reused.items():
        index, k, returned = found[0]
        more = f" (and in {len(found) - 1} more backward passes)" if len(found) > 1 else ""
        into = "the gradient autograd.grad returns is" if returned else "`.grad` receives"
        # a hook on the leaf changes the sum before it lands (hook_changed says how)
        hooked_there = name in (next(e for e in backward_events if e["index"] == index)
                                .get("hooks") or {})
        out.append(_diag(
            "multiple_uses", "info",
            f"`{name}` is used {k} times in backward #{index}{more}: each use sends its own "
            f"gradient, and {into} their sum"
            + (", with the change a hook on it made." if hooked_there else "."),
            params=[name], event=index))

    for e in backward_events:
        for name in e.get("dropped") or ():
            out.append(_dropped(recorder, named, e, name))
        err = e.get("error")
        if err and _NO_GRAD_FN in err["message"]:
            outs = [n["id"] for n in e["graph"]["nodes"] if n["kind"] == "output"]
            taken = any(e["line"] is None or line <= e["line"]
                        for _how, line in recorder.cut_log.history)
            why = ("values were taken out of a graph before it (where the error is explained, "
                   "the explanation names the line)" if taken else
                   "none of the tensors it was computed from required grad, so autograd "
                   "recorded no graph for it")
            out.append(_diag(
                "output_without_grad_fn", "error",
                f"backward() at line {e['line']} was called on a tensor with no grad_fn: {why}.",
                nodes=outs, event=e["index"]))
        bad_params = sorted(name for name, uses in e["contributions"].items()
                            if any((u["grad"] or {}).get("nonfinite") for u in uses))
        bad_edges = [x for x in e["graph"]["edges"]
                     if isinstance(x.get("grad_norm"), str)]
        if bad_params or bad_edges:
            nodes = sorted({x["target"] for x in bad_edges})
            out.append(_diag(
                "nonfinite_gradient", "error",
                f"backward #{e['index']} produced NaN or infinite gradients"
                + (f" for {', '.join(f'`{p}`' for p in bad_params)}" if bad_params else "")
                + ".", params=bad_params, nodes=nodes, event=e["index"]))
        if e.get("synthetic"):
            out.append(_diag("root_chosen", "info", e["synthetic_reason"], event=e["index"],
                             nodes=e["graph"]["roots"]))

    for qualname, result in custom_results.items():
        nodes = [n["id"] for e in backward_events for n in e["graph"]["nodes"]
                 if n.get("function") == qualname]
        if result["passed"] is False:
            out.append(_diag("gradcheck_failed", "warning",
                             f"custom Function `{qualname}`: {result['message']}.", nodes=nodes))
        elif result["passed"]:
            out.append(_diag("gradcheck_passed", "info",
                             f"custom Function `{qualname}`: gradcheck passes.", nodes=nodes))

    out.extend(_gradient_graphs(backward_events, custom_results))
    out.extend(gradcheck_findings(backward_events))
    for line in recorder.views.rendered[:5]:
        where = f"at line {line}" if line else "in the script"
        out.append(_diag(
            "make_dot_render", "info",
            f"The make_dot picture rendered {where} is drawn on this page (under \"Graphs the "
            "script drew\"): the worker runs no programs, so graphviz wrote only the DOT source."))

    skipped: dict[str, Any] = recorder.skipped
    out.extend(carryover_findings(events, steps_skipped=skipped["step"]))
    if skipped["backward"] or skipped["step"]:
        out.append(_diag("events_skipped", "info",
                         f"Only the first {recorder.limits.max_backward_events} backward passes "
                         f"and {recorder.limits.max_step_events} optimizer steps are recorded; "
                         f"{skipped['backward']} more backward passes and {skipped['step']} more "
                         "steps ran unrecorded."))
    if (watched := recorder.watched_until) is not None:
        out.extend(_watch_stopped(watched))
    # torch.func transforms whose function autograd-lab called once itself (func_forward.py)
    forward_drawn = {v["line"] for v in recorder.views.records if v["kind"] == "func_forward"}
    for line, calls in recorder.unrecorded.items():
        passed_over = recorder.func_passed_over.get(line)
        verdicts = recorder.check_verdicts.get(line) or {}
        out.append(_diag("not_drawn", "info", _not_drawn(line, calls) + (
            " The forward graph of the function it differentiates, from one ordinary call, "
            "is shown as a view (under \"Graphs the script drew\")."
            if line in forward_drawn else
            f" Its function's forward graph is not drawn: {passed_over}."
            if passed_over else "") + "".join(
            f" `{clip(function, 100)}`: {'passed' if ok else 'failed'}."
            for function, ok in list(verdicts.items())[:5])))
    for problem in recorder.internal_errors[:5]:
        out.append(_diag("tracer_error", "warning",
                         f"autograd-lab could not record part of this run ({problem}); the "
                         "script itself ran normally."))
    return out


def _dropped(recorder: Recorder, named: dict, event: dict, name: str) -> dict:
    """A leaf whose requires_grad the script switched off between the forward and this
    backward: its AccumulateGrad dropped what its uses sent (a GAN's discriminator frozen
    after its forward, before the generator's backward)."""
    tensor = named.get(name, (None,))[0]
    offs = [x for x in recorder.escapes_of(tensor) if x.how.startswith("requires_grad")] \
        if tensor is not None else []
    who = f"line {offs[-1].line} switched its `requires_grad` off" if offs else \
        "its `requires_grad` was switched off"
    kept = "kept its earlier value" if (event["grads"].get(name) or {}).get("before") \
        else "stayed None"
    return _diag("dropped_gradient", "warning",
                 f"`{name}`'s gradient in backward #{event['index']} was dropped: {who} after "
                 "the forward pass that used it and before this backward, so autograd did not "
                 f"add what its uses sent to `.grad`, which {kept}.", params=[name],
                 event=event["index"])


def _gradient_graphs(events: list[dict], custom_results: dict[str, dict]) -> list[dict]:
    """create_graph=True passes whose gradients came back without a graph: a custom Function's
    backward that cut it (gradgradcheck says whether that is wrong), or a constant gradient."""
    out = []
    for e in events:
        if not e.get("create_graph"):
            continue
        by_id = {n["id"]: n for n in e["graph"]["nodes"]}
        where = f"`{e.get('call') or 'backward'}` " + (
            f"at line {e['line']}" if e.get("line") else f"(backward #{e['index']})")
        missing = ", ".join(f"`{g}`" for g in e.get("no_graph", [])[:5])
        cutters: dict[str, list[str]] = {}
        for node_id in e.get("cut_by", []):
            function = by_id.get(node_id, {}).get("function")
            if function:
                cutters.setdefault(function, []).append(node_id)
        wrong = []
        for function, nodes in cutters.items():
            double = (custom_results.get(function) or {}).get("double") or {}
            if double.get("passed") is True:
                continue  # its gradient really is constant in its inputs: nothing was cut
            check = (f" gradgradcheck agrees: {double['message']}." if double.get("passed")
                     is False else " (gradgradcheck could not confirm it on this input.)")
            wrong.append(function)
            out.append(_diag(
                "gradient_graph_cut", "warning",
                f"{where} used create_graph=True, but the backward of custom Function "
                f"`{function}` returned a gradient with no graph"
                + (f" (so {missing} has no grad_fn)" if missing else "") + ": it computes with "
                "tensors made inside forward (intermediates, or tensors kept on `ctx`), and "
                "those carry no graph, so the gradient cannot be differentiated again. Compute "
                "it from the inputs and outputs saved with `ctx.save_for_backward(...)`, or "
                f"return the intermediates as extra outputs and save those.{check}",
                nodes=nodes, event=e["index"]))
        if missing and not wrong:
            out.append(_diag(
                "gradient_constant", "info",
                f"{where} used create_graph=True, and {missing} came back with no "
                "grad_fn: it does not depend on anything that requires grad (its derivative is "
                "constant), so there is no graph to differentiate again.", event=e["index"]))
    return out


def flow_findings(doc: dict) -> list[dict]:
    """Vanishing or exploding gradients across depth (app/format/flow.py), said once for the
    first pass that shows them, naming the modules with the smallest (or largest) gradients."""
    flow = gradient_flow(doc)
    steep = [(fe["event"], s) for i, fe in enumerate(flow["events"])
             if (s := steep_flow(flow, i)) is not None]
    if not steep:
        return []
    event, s = steep[0]
    (first, first_norm), (last, last_norm) = s["first"], s["last"]
    worst = s["small"] if s["kind"] == "vanishing" else s["large"]
    params = [p for m in flow["modules"] if m["module"] in worst for p in m["params"]]
    more = f" (and in {len(steep) - 1} more backward passes)" if len(steep) > 1 else ""
    factor = 1 / s["ratio"] if s["kind"] == "vanishing" else s["ratio"]
    return [_diag(
        f"{s['kind']}_gradients", "warning",
        f"{s['kind'].capitalize()} gradients in backward #{event}{more}: the gradient norm of "
        f"`{first}` (the first module) is {first_norm:.2g} and of `{last}` (the last) "
        f"{last_norm:.2g}, {factor:.2g}× {'smaller' if s['kind'] == 'vanishing' else 'larger'}"
        f" near the input. {'Smallest' if s['kind'] == 'vanishing' else 'Largest'} at "
        + ", ".join(f"`{m}`" for m in worst) + ". See the gradient-flow chart.",
        params=params[:50], event=event)]


def _watch_stopped(watched: dict) -> list[dict]:
    """What the recorder no longer watched after the kept passes (recorder.py
    `_stop_watching`): said, with how to have the whole run watched."""
    at = f"line {watched['line']}; " if watched.get("line") else ""
    out = [_diag(
        "watch_stopped", "info",
        f"autograd-lab watched every torch operation and module call through backward pass "
        f"{watched['passes']} ({at}it records the first {watched['records']}), then let the "
        "script run at plain speed: in-place changes, no_grad, detach(), values taken out of "
        "a graph and `.grad` reads of computed tensors after that pass are not noted here. To "
        "watch the whole run (slower), trace it on the command line with "
        "`autograd-lab trace --watch-all`.")]
    if watched.get("unwatched_views"):  # drawn after it stopped, before the script ended
        out.append(_diag(
            "views_unwatched", "info",
            f"{watched['unwatched_views']} graph(s) the script drew after backward pass "
            f"{watched['passes']} show no script line or module for their nodes: autograd-lab "
            "had stopped watching operations. `autograd-lab trace --watch-all` (the command line) "
            "has them."))
    return out
