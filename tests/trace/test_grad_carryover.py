"""What a pass did to the `.grad` an earlier one left (app/trace/grad_carryover.py), each
finding checked against PyTorch: the same script run plainly, `.grad` read before and after
each backward, and the optimizer's own groups asked who it steps."""

from __future__ import annotations

import textwrap

import torch

FORGOT = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(3, 1)
extra = torch.randn(1, requires_grad=True)   # in no optimizer
opt = torch.optim.SGD(model.parameters(), lr=0.1)
seen = []
for step in range(3):
    x = torch.randn(4, 3)
    loss = (model(x) * extra).pow(2).mean()
    seen.append({n: None if p.grad is None else p.grad.clone()
                 for n, p in [("weight", model.weight), ("extra", extra)]})
    loss.backward()
    opt.step()
"""

ZEROED = """
import torch
w = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(3):
    opt.zero_grad()
    (w * 3).sum().backward()
    opt.step()
"""

ACCUMULATE = """
import torch
w = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.SGD([w], lr=0.1)
for batch in range(2):
    (w * (batch + 1)).sum().backward()     # two batches' gradients added up, on purpose
opt.step()
opt.zero_grad()
"""

ONLY_GRAD = """
import torch
w = torch.ones(2, requires_grad=True)
(w * 3).sum().backward()
g, = torch.autograd.grad((w * 5).sum(), w)  # returns its gradient: .grad is left alone
"""


def plain(code: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    exec(compile(textwrap.dedent(code), "<plain>", "exec"), namespace)  # noqa: S102
    return namespace


def found(doc: dict, code: str) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["code"] == code]


def test_a_step_between_two_passes_without_zero_grad_is_said_as_pytorch_did_it(trace_source):
    ns = plain(FORGOT)
    # PyTorch: before the second backward, weight's .grad is the first pass's, unzeroed, and
    # the optimizer's groups hold weight and bias but not extra
    assert ns["seen"][0]["weight"] is None and ns["seen"][1]["weight"] is not None
    assert ns["seen"][1]["weight"].abs().sum() > 0
    stepped = {id(p) for g in ns["opt"].param_groups for p in g["params"]}
    assert id(ns["extra"]) not in stepped and id(ns["model"].weight) in stepped
    doc = trace_source(FORGOT)
    [warning] = found(doc, "grad_not_zeroed")
    passes = [e for e in doc["events"] if e["kind"] == "backward"]
    assert warning["event"] == passes[1]["index"] and warning["params"] == ["weight", "bias"]
    assert f"backward #{passes[0]['index']} left" in warning["message"]
    assert "zero_grad()" in warning["message"] and "1 later pass" in warning["message"]
    # extra is in no step: its carried .grad is accumulation, and it is never stepped
    [info] = found(doc, "grad_accumulated")
    assert info["params"] == ["extra"]
    [never] = found(doc, "never_stepped")
    assert never["params"] == ["extra"] and "SGD" in never["message"]
    # the norms it quotes are PyTorch's: extra's .grad after the first and the last pass
    first = float(ns["seen"][1]["extra"].norm())
    last = float(ns["extra"].grad.norm())
    assert f"{first:.4g}" in never["message"] and f"{last:.4g}" in never["message"]


def test_zero_grad_before_each_pass_leaves_nothing_to_say(trace_source):
    ns = plain(ZEROED)
    assert ns["w"].grad.tolist() == [3.0, 3.0]  # one pass's gradient: nothing carried
    doc = trace_source(ZEROED)
    assert not found(doc, "grad_not_zeroed") and not found(doc, "grad_accumulated")
    assert not found(doc, "never_stepped")


def test_accumulation_before_one_step_is_information_not_a_warning(trace_source):
    ns = plain(ACCUMULATE)
    # PyTorch: the step used the sum of both batches' gradients (1 + 2 per element)
    assert torch.allclose(ns["w"].detach(), torch.ones(2) - 0.1 * 3)
    doc = trace_source(ACCUMULATE)
    assert not found(doc, "grad_not_zeroed")
    [info] = found(doc, "grad_accumulated")
    assert info["params"] == ["w"] and "sum of both passes" in info["message"]


def test_autograd_grad_adds_nothing_to_grad_and_is_not_said_to(trace_source):
    ns = plain(ONLY_GRAD)
    assert ns["w"].grad.tolist() == [3.0, 3.0] and ns["g"].tolist() == [5.0, 5.0]
    doc = trace_source(ONLY_GRAD)
    assert not found(doc, "grad_accumulated") and not found(doc, "grad_not_zeroed")
