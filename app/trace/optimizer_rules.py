"""An optimizer step as the optimizer made it: its settings, the state it read, and a check.

A step is not "the weights move by the gradient" for every optimizer: SGD with weight decay
moves weights whose gradient is zero, and Adam moves each weight by about `lr` whatever the
gradient's scale. So a recorded step keeps each parameter group's settings (`settings`) and,
for the rules written here (SGD and Adam/AdamW, from their documented update rules, with
weight decay, momentum, dampening, Nesterov, betas, eps, AMSGrad and maximize), recomputes the
change from copies taken before the step (the weights, `.grad`, the state it read) and compares
it with the change PyTorch made (`check`). For any other optimizer the page says it does not
explain the rule, and shows only what changed.

The rules are written from PyTorch's documentation, not by calling `torch.optim`: a test runs
`torch.optim` itself on copies and holds the two to agreement."""

from __future__ import annotations

import math

import torch

__all__ = ["CHECK_MAX_NUMEL", "StepCopies", "group_settings", "state_read", "take_copies"]

CHECK_MAX_NUMEL = 2_000_000  # float64 numbers copied to check a step (weights, grads, state)
RULES = ("SGD", "Adam", "AdamW")
_STATE_KEYS = ("step", "momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")


def group_settings(group: dict) -> dict:
    """A parameter group's settings as JSON takes them: numbers, flags, strings, pairs of
    numbers (betas); a tensor learning rate as its number; everything else left out."""
    out = {}
    for key, value in group.items():
        if key == "params" or len(out) >= 40:
            continue
        value = _plain(value)
        if value is not _SKIP:
            out[str(key)[:100]] = value
    return out


_SKIP = object()


def _plain(value):
    if isinstance(value, torch.Tensor):
        return _plain(value.item()) if value.numel() == 1 else _SKIP
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else _SKIP
    if isinstance(value, str):
        return value[:100]
    if isinstance(value, tuple | list) and len(value) <= 8:
        items = [_plain(v) for v in value]
        return _SKIP if any(v is _SKIP or isinstance(v, list) for v in items) else items
    return _SKIP


def state_read(state: dict) -> dict:
    """The optimizer's state for one parameter before the step, as plain facts: its step count,
    and which buffers it held (a first step holds none: momentum and moments start there)."""
    out = {}
    for key in _STATE_KEYS:
        if key not in state:
            continue
        value = state[key]
        if key == "step":
            value = _plain(value)
            if value is not _SKIP:
                out["step"] = value
        elif isinstance(value, torch.Tensor):
            out[key] = True
    return out


class StepCopies:
    """What a step's check needs, copied before the step: each parameter's weights, its
    `.grad` and its state; None for a parameter that cannot be checked."""

    def __init__(self, kind: str, groups: list[dict]) -> None:
        self.kind = kind
        self.groups = groups
        self.copies: dict[int, tuple[int, torch.Tensor, torch.Tensor, dict]] = {}
        self.too_large = False  # past CHECK_MAX_NUMEL: nothing copied, the step unchecked
        self.closure = False  # step(closure): .grad recomputed inside the step, unchecked

    def check(self, p: torch.Tensor) -> dict | None:
        """After the step: the rule's change against PyTorch's, for `p`; None if not taken, or
        where the rule cannot be applied (a setting that is NaN, a state it does not know)."""
        try:
            return self._check(p)
        except Exception:  # noqa: BLE001 - no check rather than no step
            return {"rule": self.kind, "unchecked": "cannot_apply"}

    def _check(self, p: torch.Tensor) -> dict:
        taken = self.copies.get(id(p))
        if taken is None:
            why = "closure" if self.closure else "too_large" if self.too_large else (
                "no_grad" if p.grad is None else "cannot_apply")
            return {"rule": self.kind, "unchecked": why}
        group_index, before, grad, state = taken
        group = self.groups[group_index]
        with torch.no_grad():
            expected = _rule(self.kind, group, before, grad, state)
            after = p.detach().to("cpu", torch.float64)
            observed = after - before
            wanted = expected - before
            # the usual step: the largest absolute values, one pass each (vector_norm's inf).
            # A NaN or infinity on either side makes `difference` one too; where every one of
            # these is finite, they are the numbers the NaN-aware reading below gives
            difference = _largest(after - expected)
            scale = max(_largest(observed), _largest(wanted))
            size = _largest(before)
            if not all(math.isfinite(x) for x in (difference, scale, size)):
                if not torch.isfinite(expected).all() and torch.isfinite(after).all():
                    return {"rule": self.kind, "unchecked": "cannot_apply"}
                # NaN where both are NaN is no difference; NaN on one side only is one
                gap = (after - expected).abs().masked_fill(after.isnan() & expected.isnan(),
                                                           0.0)
                difference = gap.max().item() if gap.numel() else 0.0
                difference = math.inf if math.isnan(difference) else difference
                finite = [t.nan_to_num(0.0, 0.0, 0.0) for t in (observed, wanted, before)]
                scale = max(_largest(finite[0]), _largest(finite[1]))
                size = _largest(finite[2])
        # float32 weights round each step: a relative tolerance, and a floor for tiny steps
        # the weights' own rounding: a float32 step is exact to ~1e-7 of the weight, a bfloat16
        # one to ~1e-2 (the rule is computed in float64)
        grain = max(1e-6, 8 * torch.finfo(p.dtype).eps) if p.is_floating_point() else 1e-6
        matches = difference <= 1e-4 * scale + grain * max(1.0, size)
        return {"rule": self.kind, "matches": bool(matches),
                "largest_difference": _finite(difference),
                "expected_change_norm": _finite(wanted.norm().item()),
                "observed_change_norm": _finite(observed.norm().item())}


def take_copies(optimizer: torch.optim.Optimizer, closure: bool = False) -> StepCopies | None:
    """Copies for the check, or None where no rule here applies. Parameters too many to copy,
    or a copy that failed, leave the step recorded and said to be unchecked. A step given a
    closure recomputes `.grad` inside itself, after these copies: not checked."""
    kind = type(optimizer).__name__
    if kind not in RULES or type(optimizer).__module__.split(".")[:2] != ["torch", "optim"]:
        return None
    if closure:
        copies = StepCopies(kind, [])
        copies.closure = True
        return copies
    try:
        return _copies(optimizer)
    except Exception:  # noqa: BLE001 - a parameter we cannot copy (meta, a subclass): no check
        return StepCopies(kind, [])


def _copies(optimizer: torch.optim.Optimizer) -> StepCopies:
    kind = type(optimizer).__name__
    groups = [dict(g) for g in optimizer.param_groups]
    copies = StepCopies(kind, groups)
    checked = [(index, p, optimizer.state.get(p, {}))
               for index, group in enumerate(optimizer.param_groups) for p in group["params"]
               if not (p.grad is None or p.grad.is_sparse or p.is_complex())]
    # counted before anything is copied: a model past the bound (a 6-layer encoder with Adam)
    # had most of its weights copied, then dropped, on every step
    wanted = sum(p.numel() * (2 + sum(isinstance(v, torch.Tensor) and v.numel() > 1
                                      for v in state.values())) for _i, p, state in checked)
    if wanted > CHECK_MAX_NUMEL:
        copies.too_large = True
        return copies
    with torch.no_grad():
        for index, p, state in checked:
            # on the CPU, in float64: a GPU's memory is the script's, and the rule is
            # computed more exactly than the step it checks
            state = {k: (v.detach().to("cpu", torch.float64, copy=True)
                         if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
            copies.copies[id(p)] = (index, p.detach().to("cpu", torch.float64, copy=True),
                                    p.grad.detach().to("cpu", torch.float64, copy=True),
                                    state)
    return copies


def _rule(kind: str, group: dict, p: torch.Tensor, grad: torch.Tensor,
          state: dict) -> torch.Tensor:
    """The weights after one step of `kind`'s documented rule, in float64."""
    lr = float(_plain(group["lr"]))
    g = -grad if group.get("maximize") else grad
    weight_decay = float(group.get("weight_decay") or 0.0)
    if kind == "SGD":
        if weight_decay:
            g = g + weight_decay * p
        momentum = float(group.get("momentum") or 0.0)
        if momentum:
            buf = state.get("momentum_buffer")
            dampening = float(group.get("dampening") or 0.0)
            buf = g.clone() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if group.get("nesterov") else buf
        return p - lr * g
    # Adam and AdamW: AdamW (or Adam's decoupled_weight_decay) shrinks the weights first,
    # Adam adds the decay to the gradient
    beta1, beta2 = (float(b) for b in group["betas"])
    eps = float(group["eps"])
    decoupled = kind == "AdamW" or bool(group.get("decoupled_weight_decay"))
    if weight_decay and decoupled:
        p = p * (1 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    step = float(_plain(state.get("step", 0.0)) or 0.0) + 1
    # the state's copies are this check's own, read once: written in place, each operation
    # in the order (and with the rounding) of the rule as written out, with fewer temporaries
    m = state["exp_avg"] if "exp_avg" in state else torch.zeros_like(p)
    v = state["exp_avg_sq"] if "exp_avg_sq" in state else torch.zeros_like(p)
    m.mul_(beta1).add_((1 - beta1) * g)  # beta1 * m + (1 - beta1) * g
    v.mul_(beta2).add_((1 - beta2) * g * g)  # beta2 * v + (1 - beta2) * g * g
    if group.get("amsgrad"):
        v = torch.maximum(state.get("max_exp_avg_sq", torch.zeros_like(p)), v)
    denom = v.sqrt_().div_(math.sqrt(1 - beta2 ** step)).add_(eps)
    return p - m.mul_(lr / (1 - beta1 ** step)).div_(denom)  # p - (lr / bc1) * m / denom


def _largest(t: torch.Tensor) -> float:
    """The largest absolute value in `t` (0 for an empty one); NaN if it holds one."""
    return float(torch.linalg.vector_norm(t, ord=math.inf)) if t.numel() else 0.0


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
