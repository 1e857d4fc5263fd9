"""Tensor summaries: what the Trace says about a tensor.

Shape, dtype, device, min/max/mean/norm, and the values themselves when small enough to draw.
JSON has no NaN or infinity, so those are written as the strings "NaN", "Infinity",
"-Infinity" (the names JavaScript gives them).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from app.format import json_number

MAX_VALUES = 4096

__all__ = ["MAX_VALUES", "EdgeNorms", "Rounding", "summarize", "summarize_many", "describe",
           "norm_of"]


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
              budget: ValueBudget | None = None,
              rounding: Rounding | None = None) -> dict[str, Any] | None:
    """Full summary of `t` (None stays None); its values only while `budget` lasts. With
    `rounding`, the values are left to it (they are in the summary once it has rounded)."""
    return summarize_many([t], with_values, budget, rounding)[0]


class Rounding:
    """Summaries whose values wait for their 9-digit rounding: a dozen torch calls, the same
    for 128 numbers as for 4,096, so done once for them all (`round()`), not once each (a
    traced encoder step's 50 small parameters paid it 300 times, a third of its summaries).
    It is elementwise: each number comes out as it would alone. What waits is our own float64
    copy, at most MAX_VALUES numbers a tensor, within the run's ValueBudget."""

    def __init__(self) -> None:
        self._waiting: list[tuple[dict[str, Any], torch.Tensor]] = []

    def add(self, summary: dict[str, Any], x: torch.Tensor) -> None:
        self._waiting.append((summary, x))

    def round(self) -> None:
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        with torch.no_grad(), _ours():
            values = _nine_digits(torch.cat([x.reshape(-1) for _one, x in waiting])).tolist()
        start = 0
        for one, x in waiting:
            n = x.numel()
            _keep_values(one, _nested(values[start:start + n], list(x.shape)))
            start += n


def summarize_many(tensors: list[torch.Tensor | None], with_values: bool = True,
                   budget: ValueBudget | None = None,
                   rounding: Rounding | None = None) -> list[dict[str, Any] | None]:
    """`summarize` of each of `tensors`, in order (the budget taken in that order too), their
    values rounded together (Rounding) unless `rounding` is given to round them later."""
    out: list[dict[str, Any] | None] = []
    later = rounding if rounding is not None else Rounding()
    # one pass of our own for them all, past every __torch_function__ (reading a tensor's
    # shape, dtype and device went through the recorder's mode, three calls a summary)
    with torch.no_grad(), _ours():
        for t in tensors:
            if t is None:
                out.append(None)
                continue
            one = describe(t)
            out.append(one)
            if t.layout != torch.strided or t.device.type == "meta":
                one["layout"] = str(t.layout).removeprefix("torch.")
                continue
            x = _statistics(t, one)
            n = one["numel"]
            if with_values and n <= MAX_VALUES and (budget is None or budget.take(n)):
                if t.dtype in _SINGLE_OR_LESS and n > _FEW:
                    later.add(one, x)
                else:
                    kept = _nine_digits(x) if t.dtype in _SINGLE_OR_LESS else x
                    _keep_values(one, kept.tolist())
    if rounding is None:
        later.round()
    return out


def _statistics(t: torch.Tensor, out: dict[str, Any]) -> torch.Tensor:
    """numel, nonfinite, min, max, mean, norm and abs_mean of `t` into `out`; returns the
    float64 copy they were computed from."""
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    x = x.to("cpu", torch.float64)
    n = x.numel()
    out["numel"] = n
    if n:
        # four passes over the values, not seven (a traced transformer summarised 3,000
        # gradients): a finite sum means every value is finite (float64 cannot overflow
        # on a sum of float32s), and it is the mean's
        total = float(x.sum())
        out["nonfinite"] = 0 if math.isfinite(total) else int(n - int(torch.isfinite(x).sum()))
        low, high = torch.aminmax(x)
        out["min"] = json_number(float(low))
        out["max"] = json_number(float(high))
        out["mean"] = json_number(total / n if math.isfinite(total) else float(x.mean()))
        # what Tensor.norm() calls for a strided tensor, without its two Python frames
        out["norm"] = json_number(float(torch.linalg.vector_norm(x)))
        out["abs_mean"] = json_number(float(x.abs().sum()) / n)
    return x


def _keep_values(out: dict[str, Any], values: Any) -> None:
    # plain floats are valid JSON as they are; only NaN/inf need spelling out
    out["values"] = _clean(values) if out.get("nonfinite") else values


def _nested(flat: list, shape: list[int]) -> list:
    """`flat` (a tensor's values in order) as `tolist()` nests them for `shape`."""
    if len(shape) <= 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nested(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _nine_digits(x: torch.Tensor) -> torch.Tensor:
    """`x` (float64 copies of float32 or narrower values) as the nearest numbers of 9
    significant digits, which Python writes in 9 digits or fewer: 9 are enough to give back
    every float32 exactly, and the 17 that a float64 copy is written with made the values most
    of a big model's Trace (a third of its JSON went). Zeros, infinities and NaN stay."""
    if x.numel() <= _FEW:  # a dozen torch calls cost more than formatting a few numbers
        return torch.tensor([float(f"{v:.9g}") for v in x.reshape(-1).tolist()],
                            dtype=torch.float64).reshape(x.shape)
    size = x.abs()
    digits = torch.floor(torch.log10(torch.where(size > 0, size, torch.ones_like(size))))
    k = 8 - digits
    # 10**k is exact for 0 <= k <= 22: dividing by it rounds once, to the nearest double of
    # the 9-digit decimal (and for k < 0, multiplying does). Read from a table of the nearest
    # doubles: torch.pow's vectorised and scalar paths disagree on a few k past 22 (23, 45),
    # so a number's rounding depended on where it sat in its tensor
    power = _powers_of_ten(x.device)[k.abs().clamp(max=300).long()]
    short = torch.where(k >= 0, torch.round(x * power) / power, torch.round(x / power) * power)
    return torch.where(torch.isfinite(short) & (size > 0), short, x)


_POWERS: dict[torch.device, torch.Tensor] = {}


def _powers_of_ten(device: torch.device) -> torch.Tensor:
    table = _POWERS.get(device)
    if table is None:
        table = torch.tensor([float(10**i) for i in range(301)], dtype=torch.float64,
                             device=device)
        _POWERS[device] = table
    return table


def norm_of(t: torch.Tensor) -> float | str | None:
    """The L2 norm alone: the cheap figure drawn on every gradient edge."""
    if t is None or t.layout != torch.strided or t.device.type == "meta":
        return None
    with torch.no_grad(), _ours():
        x = t.detach()
        if x.is_complex():
            x = x.abs()
        if x.dtype in _SINGLE_OR_LESS:
            # in float32, without a float64 copy: 10 times cheaper, and the copy was most of a
            # traced transformer's cost over a plain run (every edge of ten passes has one).
            # Squares of float32 under- or overflow far from 1: outside these bounds, float64
            norm = _chunked_norm(x)
            if _SINGLE_SAFE[0] <= norm <= _SINGLE_SAFE[1]:
                return json_number(norm)
        return json_number(float(x.to(torch.float64).norm()))


class EdgeNorms:
    """`norm_of` for each edge of a pass, its float64 half done once for all of them when the
    pass ends (`finish`). Each edge's chunk norms (float32, a number per 1,024 values, our own
    small tensor: the gradient itself is not kept) are taken as it passes; squaring, summing
    and the square root then run on the chunk norms of every edge with as many chunks at
    once, where each edge had paid half a dozen torch calls of its own (480 edges in a
    6-layer encoder's pass). Row by row these give each edge's number as norm_of does. An
    edge that may fall outside float32's safe range, or whose length is no whole number of
    chunks, or on another device than the CPU, gets norm_of at once."""

    def __init__(self) -> None:
        self._waiting: dict[int, list[tuple[dict, torch.Tensor]]] = {}  # by chunks per edge

    def norm_into(self, entry: dict, t: torch.Tensor) -> None:
        """entry["grad_norm"]: norm_of(t), now or at finish()."""
        with torch.no_grad(), _ours():
            rows = _chunk_norms_if_safe(t)
        if rows is None:
            entry["grad_norm"] = norm_of(t)
            return
        entry["grad_norm"] = None  # its place among the entry's keys, filled at finish()
        self._waiting.setdefault(rows.numel(), []).append((entry, rows))

    def finish(self) -> None:
        waiting, self._waiting = self._waiting, {}
        with torch.no_grad(), _ours():
            for group in waiting.values():
                norms = torch.stack([rows for _entry, rows in group]).double().square() \
                    .sum(dim=1).sqrt().tolist()
                for (entry, _rows), norm in zip(group, norms, strict=True):
                    entry["grad_norm"] = json_number(norm)


def _chunk_norms_if_safe(t: torch.Tensor | None) -> torch.Tensor | None:
    """The float32 norms of `t`'s chunks, where `_chunked_norm` would use them all and its
    result is sure to be inside _SINGLE_SAFE (it is at least the largest chunk's norm and at
    most that times the root of their count); None where norm_of must see `t` itself."""
    # on the CPU only: a GPU's reduction may split a (edges, chunks) sum other than one
    # edge's, and there one edge at a time stays exactly norm_of
    if t is None or t.layout != torch.strided or t.device.type != "cpu" or t.is_complex() \
            or t.dtype not in _SINGLE_OR_LESS:
        return None
    n = t.numel()
    if n <= _CHUNK or n % _CHUNK:
        return None
    rows = torch.linalg.vector_norm(t.reshape(-1).view(-1, _CHUNK), dim=1, dtype=torch.float32)
    top = float(rows.amax())
    if not (_SINGLE_SAFE[0] <= top and top * math.sqrt(n // _CHUNK) <= 0.99 * _SINGLE_SAFE[1]):
        return None  # NaN and infinity included
    return rows


def _ours():
    """Our own arithmetic on a tensor, past every __torch_function__ (the recorder's mode
    would see a dozen calls per summary, 0.15 s of a traced transformer's run; a subclass of
    the script's is summarised as the plain tensor it holds)."""
    return torch._C.DisableTorchFunction()


_SINGLE_OR_LESS = (torch.float32, torch.float16, torch.bfloat16)
_FEW = 48
# a norm in here has a sum of squares in 1e-20..1e20: far inside float32's range, and the
# squares that underflowed (each < 1e-38) cannot matter to it
_SINGLE_SAFE = (1e-10, 1e10)
# and a float32 sum of more squares than this drifts past a display's digits (a reviewer
# measured 0.9% on 16M constant entries): longer tensors are summed in chunks of this many,
# whose float32 norms are added in float64 (4e-7 from float64 on 16M equal entries)
_CHUNK = 1_024


def _chunked_norm(x: torch.Tensor) -> float:
    flat = x.reshape(-1)
    n = flat.numel()
    if n <= _CHUNK:
        return float(torch.linalg.vector_norm(flat, dtype=torch.float32))
    whole = n - n % _CHUNK
    # every edge of a pass pays this: no slice when the chunks fill it. (torch's square root
    # stays: on a float64 it is not always the nearest double that math.sqrt gives)
    rows = (flat if whole == n else flat[:whole]).view(-1, _CHUNK)
    parts = torch.linalg.vector_norm(rows, dim=1, dtype=torch.float32).double().square().sum()
    if whole < n:
        parts = parts + float(torch.linalg.vector_norm(flat[whole:], dtype=torch.float32)) ** 2
    return float(parts.sqrt())
