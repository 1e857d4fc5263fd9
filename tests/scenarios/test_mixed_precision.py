"""mixed_precision: autocast's gradients flow back in bfloat16 along the casts and the matrix
multiplies, the weights' `.grad` stays float32, GradScaler's scale multiplies the backward's
gradients and is divided out before the step, and an overflowing float16 backward skips it.

Each fact is PyTorch's own: the scenario's step redone plainly here (hooks on its nodes, the
scaler's get_scale(), the weights before and after), or torch.finfo, never the Trace read back."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from app.catalog import load_catalog
from tests.conftest import SCENARIOS
from tests.scenarios.helpers import line_of, nodes_named
from tests.trace_facts import (
    backward_events,
    diagnostics,
    drawn_dtypes,
    gradients_by_node,
    step_events,
    values,
)

PARAMS = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def step(plain, variant: str):
    """The scenario's model, data and loss made here as the script makes them, for `variant`."""
    ns = plain("mixed_precision", "--variant", variant)
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("fc1", nn.Linear(4, 8))
    model.add_module("relu", nn.ReLU())
    model.add_module("fc2", nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    assert torch.equal(x, ns["x"]) and torch.equal(y, ns["y"])
    low = torch.float16 if variant == "skipped" else torch.bfloat16
    with torch.autocast("cpu", dtype=low, enabled=variant != "float32"):
        out = model(x)
    return model, nn.functional.mse_loss(out.float(), y), ns


@pytest.mark.parametrize("variant", ["autocast", "float32", "scaled"])
def test_edge_dtypes_are_the_gradients_pytorch_passed(traced, plain, variant):
    model, loss, _ = step(plain, variant)
    root = loss * 2.0 ** 16 if variant == "scaled" else loss  # scaler.scale's multiply
    seen = gradients_by_node(root)
    doc = traced("mixed_precision", "--variant", variant)
    (event,) = backward_events(doc)
    assert drawn_dtypes(event) == seen
    dtypes = {dtype for (_, _, dtype) in seen}
    if variant == "float32":
        assert dtypes == {"float32"} and not nodes_named(event, "ToCopyBackward0")
        return
    # what the narration says: addmm and ReLU pass bfloat16 gradients back, each weight and
    # bias has a cast of its own, and every .grad is float32
    for name in ("AddmmBackward0", "ReluBackward0"):
        assert {d for (n, _, d) in seen if n == name} == {"bfloat16"}, name
    assert len(nodes_named(event, "ToCopyBackward0")) == 1 + len(PARAMS)  # out.float() too
    # the weights' casts hand float32 to their AccumulateGrad, out.float() bfloat16 to addmm
    casts = Counter()
    for (n, _, dtype), count in seen.items():
        casts[dtype] += count if n == "ToCopyBackward0" else 0
    assert +casts == Counter({"float32": len(PARAMS), "bfloat16": 1})
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_float16_underflows_where_bfloat16_does_not():
    tiny = torch.tensor(1e-8)
    assert tiny.half().item() == 0.0 and tiny.bfloat16().item() != 0.0
    assert torch.tensor(2.9e-8).half().item() == 0.0  # "below about 3e-8 rounds to zero"
    assert torch.tensor(3.1e-8).half().item() != 0.0
    assert torch.finfo(torch.bfloat16).tiny == torch.finfo(torch.float32).tiny
    assert f"{torch.finfo(torch.float32).tiny:.1e}" == "1.2e-38"  # "about 1.2e-38"
    assert torch.finfo(torch.float16).max == 65504
    assert torch.amp.GradScaler("cpu").get_scale() == 65536.0  # the default scale


def test_scaled_backward_carries_the_scale_and_the_step_divides_it_out(traced, plain):
    doc = traced("mixed_precision", "--variant", "scaled")
    (event,) = backward_events(doc)
    (stepped,) = step_events(doc)
    ns = plain("mixed_precision", "--variant", "scaled")
    assert stepped["scaler"] == {"scale": ns["scaler"].get_scale()} == {"scale": 65536.0}
    model, loss, _ = step(plain, "autocast")
    loss.backward()
    for name, param in model.named_parameters():
        # backward left .grad 65536 times the unscaled loss's gradient...
        assert torch.allclose(values(event["grads"][name]["after"]),
                              param.grad.double() * 65536, rtol=1e-6), name
        # ...and the step used it divided back: the .grad PyTorch left after scaler.step
        assert torch.allclose(values(stepped["params"][name]["grad"]),
                              ns["model"].get_parameter(name).grad.double(), atol=1e-7), name
        assert torch.allclose(ns["model"].get_parameter(name).grad, param.grad, atol=1e-7), name
    assert not diagnostics(doc, "grad_scaler_skipped_step")


def test_an_overflowing_float16_backward_skips_the_step(traced, plain):
    doc = traced("mixed_precision", "--variant", "skipped")
    ns = plain("mixed_precision", "--variant", "skipped")
    # PyTorch's own: the float16 gradients overflowed, the weights never moved, the scale halved
    grads = [p.grad for p in ns["model"].parameters()]
    assert not all(torch.isfinite(g).all() for g in grads)
    assert torch.equal(ns["model"].fc1.weight.detach(), ns["before"])
    assert ns["scaler"].get_scale() == 2.0 ** 23
    assert not step_events(doc)  # no optimizer.step() ran
    (said,) = [d["message"] for d in diagnostics(doc, "grad_scaler_skipped_step")]
    line = line_of("mixed_precision", "scaler.step(optimizer)")
    assert f"at line {line} skipped optimizer.step()" in said
    assert f"scaled by {2.0 ** 24:g}" in said and f"set the scale to {2.0 ** 23:g}" in said
    # "in bfloat16 the same scale would have been fine"
    model, loss, _ = step(plain, "autocast")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.fc1.weight.detach().clone()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    assert not torch.equal(model.fc1.weight.detach(), before)
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 24


def test_presenter_steps_point_at_what_their_variant_records(traced):
    """The first step's cast node is in the opening variant's graph and its line in the code;
    the second step's finding is the `skipped` variant's (presenter mode says so on the others,
    and V switches)."""
    steps = load_catalog(SCENARIOS)["mixed_precision"].steps
    first, second = [s["show"] for s in steps if s["show"]]
    (event,) = backward_events(traced("mixed_precision", "--variant", "autocast"))
    assert nodes_named(event, first[0]["node"])
    assert line_of("mixed_precision", first[1]["line"])
    assert second == [{"diagnostic": "grad_scaler_skipped_step"}]
    assert diagnostics(traced("mixed_precision", "--variant", "skipped"), second[0]["diagnostic"])
