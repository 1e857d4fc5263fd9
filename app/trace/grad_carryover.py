"""What a backward pass did to the `.grad` an earlier one left, and parameters no step moves.

Read from the recorded events alone (no torch): each backward event holds every parameter's
`.grad` before and after it (`grads`), and each step event the parameters of its optimizer's
groups. Three findings a reader otherwise sees only in one pass's bars:

- `grad_not_zeroed` (warning): a pass added onto a `.grad` that an optimizer step had already
  used, with nothing setting it to None or zero in between: the classic forgotten `zero_grad`.
- `grad_accumulated` (info): a pass added onto an earlier pass's `.grad` with no step between:
  gradient accumulation, meant or not.
- `never_stepped` (warning): a parameter whose `.grad` grows over the passes while optimizers
  step, none of which holds it.

`.grad` that is None or all zeros before a pass counts as cleared (`zero_grad()` sets None by
default since torch 2.0, zeros with `set_to_none=False`).
"""

from __future__ import annotations

import math

from app.format import diagnostic

__all__ = ["carryover_findings"]

_NAMED = 3  # parameters named in a sentence; the rest are counted


def carryover_findings(events: list[dict], steps_skipped: int = 0) -> list[dict]:
    # torch.autograd.grad returns its gradients and leaves .grad alone (`inputs` says it was one)
    passes = [e for e in events if e["kind"] == "backward" and e.get("grads")
              and "inputs" not in e]
    steps = [e for e in events if e["kind"] == "step"]
    out: list[dict] = []
    not_zeroed, accumulated = _carried(passes, steps)
    out += _said(not_zeroed, "grad_not_zeroed", "warning", steps)
    out += _said(accumulated, "grad_accumulated", "info", steps)
    out += _never_stepped(passes, steps, steps_skipped)
    return out


def _carried(passes: list[dict], steps: list[dict]):
    """[(pass, earlier pass, step between or None, [names])] for each pass that added onto a
    `.grad` an earlier pass left, split by whether a step used that `.grad` in between."""
    not_zeroed, accumulated = [], []
    last_left: dict[str, dict] = {}  # name -> the last pass that left it a .grad
    for event in passes:
        with_step: dict[tuple[int, int], list[str]] = {}
        without: dict[int, list[str]] = {}
        # what this pass sent to .grad: its uses, and what a backward inside it added; a
        # gradient AccumulateGrad dropped never arrived
        added = (set(event.get("uses", {})) | set(event.get("inner", ()))) - \
            set(event.get("dropped", ()))
        for name, grads in event["grads"].items():
            earlier = last_left.get(name)
            if earlier is not None and name in added and _holds_values(grads.get("before")):
                step = _step_between(steps, earlier["index"], event["index"], name)
                if step is not None:
                    with_step.setdefault((earlier["index"], step["index"]), []).append(name)
                else:
                    without.setdefault(earlier["index"], []).append(name)
            if grads.get("after") is not None:
                last_left[name] = event
        for (earlier, step), names in with_step.items():
            not_zeroed.append((event, earlier, step, names))
        for earlier, names in without.items():
            accumulated.append((event, earlier, None, names))
    return not_zeroed, accumulated


def _holds_values(summary: dict | None) -> bool:
    """A `.grad` that was there and not all zeros (a NaN norm counts: it holds something)."""
    if summary is None:
        return False
    norm = summary.get("norm")
    if isinstance(norm, str):  # "NaN" or "Infinity", as the Trace writes them
        return True
    return isinstance(norm, (int, float)) and (norm != 0 or math.isnan(norm))


def _step_between(steps: list[dict], after: int, before: int, name: str) -> dict | None:
    """The last step between two events that held this parameter (it read its `.grad`)."""
    held = [s for s in steps if after < s["index"] < before and name in s.get("params", {})]
    return held[-1] if held else None


def _names(names: list[str]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:_NAMED])
    return shown + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")


def _said(found: list, code: str, level: str, steps: list[dict]) -> list[dict]:
    """One finding for the first pass it happened in, with how often it happened after."""
    if not found:
        return []
    event, earlier, step, names = found[0]
    later = len({f[0]["index"] for f in found}) - 1
    again = (f" The same happens in {later} later pass{'es' if later > 1 else ''}."
             if later else "")
    if code == "grad_not_zeroed":
        stepped_after = any(s["index"] > event["index"] and
                            any(n in s.get("params", {}) for n in names) for s in steps)
        message = (
            f"Backward #{event['index']} adds its gradients onto the `.grad` that backward "
            f"#{earlier} left for {_names(names)}: step #{step} used that `.grad`, and nothing "
            "set it to None or zero after it, so `.grad` now holds the sum of both passes' "
            "gradients" + (" and the next step uses that sum." if stepped_after else ".")
            + again + " If each step should use one batch's gradient, call "
            "`optimizer.zero_grad()` before each backward (or after each step).")
    else:
        message = (
            f"Backward #{event['index']} adds its gradients onto the `.grad` that backward "
            f"#{earlier} left for {_names(names)} (nothing set it to None or zero between "
            "them): `.grad` now holds the sum of both passes' gradients." + again)
    return [diagnostic(code, level, message, params=names, event=event["index"])]


def _never_stepped(passes: list[dict], steps: list[dict], steps_skipped: int) -> list[dict]:
    """Parameters that collect a `.grad` in two or more passes while steps run, in none of the
    stepping optimizers' groups."""
    if not steps:
        return []
    stepped = {name for s in steps for name in s.get("params", {})}
    kept: dict[str, list[dict]] = {}  # name -> the passes that left it a .grad
    for event in passes:
        for name, grads in event["grads"].items():
            if grads.get("after") is not None and name not in stepped:
                kept.setdefault(name, []).append(event)
    names = [n for n, got in kept.items() if len(got) >= 2]
    if not names:
        return []
    optimizers = sorted({f"{s['optimizer']} (line {s['line']})" if s.get("line") else
                         s["optimizer"] for s in steps})
    first, last = kept[names[0]][0], kept[names[0]][-1]
    grew = _norms(first["grads"][names[0]]["after"], last["grads"][names[0]]["after"])
    unsure = (f" ({steps_skipped} more steps ran unrecorded: an optimizer seen only in those "
              "is not counted)") if steps_skipped else ""
    return [diagnostic(
        "never_stepped", "warning",
        f"{_names(names)} {'is' if len(names) == 1 else 'are'} in none of the optimizers that "
        f"stepped ({', '.join(optimizers[:3])}){unsure}: {len(steps)} step"
        f"{'s' if len(steps) > 1 else ''} never changed {'it' if len(names) == 1 else 'them'}, "
        f"while backward passes kept giving {'it' if len(names) == 1 else 'them'} a `.grad`"
        f"{grew}. Pass {'it' if len(names) == 1 else 'them'} to an optimizer (or set "
        "`requires_grad=False` if it should stay fixed).", params=names, event=last["index"])]


def _norms(first: dict | None, last: dict | None) -> str:
    a, b = (first or {}).get("norm"), (last or {}).get("norm")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return f" (‖.grad‖ {a:.4g} after the first of those passes, {b:.4g} after the last)"
    return ""
