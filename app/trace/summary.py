"""Tensor summaries: what the Trace says about a tensor.

Shape, dtype, device, min/max/mean/norm, and the values themselves when small enough to draw.
JSON has no NaN or infinity, so those are written as the strings "NaN", "Infinity",
"-Infinity" (the names JavaScript gives them).
"""

from __future__ import annotations

from typing import Any

import torch

from app.format import json_number

MAX_VALUES = 4096

__all__ = ["MAX_VALUES", "summarize", "describe", "norm_of"]


def describe(t: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype and device only: cheap, for saved tensors and edges."""
    return {
        "shape": list(t.shape),
        "dtype": str(t.dtype).removeprefix("torch."),
        "device": str(t.device),
    }


def _clean(values: Any) -> Any:
    if isinstance(values, list):
        return [_clean(v) for v in values]
    return json_number(float(values))


RUN_VALUES = 250_000  # numbers a run's summaries carry in all


class ValueBudget:
    """The numbers a run's summaries may carry in all. A 96-layer model has a thousand
    parameters, each summarised in every pass's contributions, grads and steps: with every
    value kept its report passed 50 MB, more than a worker may send or a browser wants to load.
    Past the budget a summary keeps its statistics (min, max, mean, norm) without values."""

    def __init__(self, limit: int = RUN_VALUES) -> None:
        self.left = limit
        self.dropped = 0

    def take(self, n: int) -> bool:
        if n > MAX_VALUES:
            return False
        if n > self.left:
            self.dropped += 1
            return False
        self.left -= n
        return True


def summarize(t: torch.Tensor | None, with_values: bool = True,
              budget: ValueBudget | None = None) -> dict[str, Any] | None:
    """Full summary of `t` (None stays None); its values only while `budget` lasts."""
    if t is None:
        return None
    out = describe(t)
    if t.layout != torch.strided or t.device.type == "meta":
        out["layout"] = str(t.layout).removeprefix("torch.")
        return out
    with torch.no_grad():
        x = t.detach()
        if x.is_complex():
            x = x.abs()
        x = x.to("cpu", torch.float64)
        n = x.numel()
        out["numel"] = n
        if n:
            finite = torch.isfinite(x)
            out["nonfinite"] = int(n - int(finite.sum()))
            out["min"] = json_number(float(x.min()))
            out["max"] = json_number(float(x.max()))
            out["mean"] = json_number(float(x.mean()))
            out["norm"] = json_number(float(x.norm()))
            out["abs_mean"] = json_number(float(x.abs().mean()))
        if with_values and n <= MAX_VALUES and (budget is None or budget.take(n)):
            # plain floats are valid JSON as they are; only NaN/inf need spelling out
            out["values"] = _clean(x.tolist()) if out.get("nonfinite") else x.tolist()
    return out


def norm_of(t: torch.Tensor) -> float | str | None:
    """The L2 norm alone: the cheap figure drawn on every gradient edge."""
    if t is None or t.layout != torch.strided or t.device.type == "meta":
        return None
    with torch.no_grad():
        x = t.detach()
        if x.is_complex():
            x = x.abs()
        return json_number(float(x.to(torch.float64).norm()))
