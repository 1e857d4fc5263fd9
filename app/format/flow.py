"""Gradient flow: how big each module's gradient is, in depth order, after each backward pass.

PyTorch's "Visualizing Gradients" tutorial hooks every layer and plots mean |grad| against
depth; a Trace already holds those numbers (each parameter's `.grad` summarised after each
pass), so this reads them from the document. A module's norm is the L2 norm of all its
parameters' gradients together, sqrt(sum of their squared norms); its mean |grad| is over all
their elements. Torch-free: the tracer flags vanishing and exploding gradients with it, and the
web serves it as JSON and draws it.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["gradient_flow", "steep_flow", "FLOW_RATIO"]

# first layer's gradient norm against the last's: beyond this factor either way, flagged
FLOW_RATIO = 1e3
# a run records at most 10 backward passes; a forged report may claim 200 passes of 100,000
# parameters each, and the web process must not spend seconds reading that
MAX_EVENTS = 20
MAX_PARAMS = 20_000


def _number(x: Any) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return _finite(float(x))
    return None


def _finite(x: float) -> float | None:
    """JSON has no infinity: a number that is not finite is left out (None)."""
    return x if math.isfinite(x) else None


def gradient_flow(doc: dict) -> dict:
    """{"modules": [{"module", "params"}...] in depth order, "events": [{"event", "line",
    "norm": [...], "abs_mean": [...]}] (a value per module, None where it had no gradient),
    "params": {name: {"module", "norm": [per event]}}}."""
    modules: dict[str, list[str]] = {}
    for name, param in list(doc.get("params", {}).items())[:MAX_PARAMS]:
        # a model's parameters only: an input leaf with requires_grad is not a layer
        if param.get("requires_grad") is False or param.get("kind") != "parameter":
            continue
        # parameters are listed as their models list them, so modules come in depth order
        modules.setdefault(param.get("module") or name, []).append(name)
    events = [e for e in doc.get("events", []) if e.get("kind") == "backward"][:MAX_EVENTS]
    out_events = []
    params: dict[str, dict] = {name: {"module": module, "norm": []}
                               for module, names in modules.items() for name in names}
    for e in events:
        norms, means = [], []
        for names in modules.values():
            found, weighted, count = [], 0.0, 0
            for name in names:
                after = ((e.get("grads") or {}).get(name) or {}).get("after") or {}
                norm, numel = _number(after.get("norm")), after.get("numel")
                params[name]["norm"].append(norm)
                if norm is None:
                    continue
                found.append(norm)
                mean = _number(after.get("abs_mean"))
                if mean is not None and isinstance(numel, int) and numel > 0:
                    weighted += mean * numel
                    count += numel
            # hypot, not a sum of squares: norms past 1e154 must not overflow to infinity
            norms.append(_finite(math.hypot(*found)) if found else None)
            means.append(_finite(weighted / count) if count else None)
        out_events.append({"event": e["index"], "line": e.get("line"), "norm": norms,
                           "abs_mean": means})
    return {"modules": [{"module": m, "params": names} for m, names in modules.items()],
            "events": out_events, "params": params}


def steep_flow(flow: dict, event_index: int = 0) -> dict | None:
    """Vanishing or exploding gradients in one pass of `flow`: the first module's norm against
    the last's beyond FLOW_RATIO. {"kind", "ratio", "small": [modules], "large": [modules]}."""
    if event_index >= len(flow["events"]):
        return None
    norms = flow["events"][event_index]["norm"]
    named = [(m["module"], n) for m, n in zip(flow["modules"], norms, strict=True)
             if n is not None and n > 0 and math.isfinite(n)]
    if len(named) < 3:
        return None
    first, last = named[0][1], named[-1][1]
    ratio = first / last
    if 1 / FLOW_RATIO <= ratio <= FLOW_RATIO:
        return None
    by_size = sorted(named, key=lambda item: item[1])
    return {"kind": "vanishing" if ratio < 1 else "exploding", "ratio": ratio,
            "small": [m for m, _ in by_size[:3]], "large": [m for m, _ in by_size[-3:][::-1]],
            "first": named[0], "last": named[-1]}
