"""Gradient flow across depth (app/format/flow.py): each module's gradient norm and mean |grad|
after each pass equal what PyTorch computes on the same `.grad`s; vanishing and exploding
gradients are said, naming the modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from app.format.flow import gradient_flow
from tests.trace_facts import diagnostics

SIGMOIDS = """
import torch
from torch import nn
torch.manual_seed(0)
layers = []
for _ in range({depth}):
    layers += [nn.Linear(16, 16), nn.{act}()]
net = nn.Sequential(*layers, nn.Linear(16, 1))
for step in range(2):
    net(torch.randn(8, 16) * {scale}).pow(2).mean().backward()
"""


def same_net(depth: int, act: str, scale: float) -> nn.Sequential:
    """The script's net, trained the same way here, for PyTorch's own numbers."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(16, 16), getattr(nn, act)()]
    net = nn.Sequential(*layers, nn.Linear(16, 1))
    return net


@pytest.mark.parametrize("act, scale", [("Sigmoid", 1.0), ("ReLU", 1.0)])
def test_flow_numbers_are_pytorchs_norms_of_the_same_grads(trace_source, act, scale):
    doc = trace_source(SIGMOIDS.format(depth=6, act=act, scale=scale))
    assert doc["error"] is None, doc["error"]
    flow = gradient_flow(doc)
    assert [m["module"] for m in flow["modules"]] == [str(i) for i in range(0, 13, 2)]
    net = same_net(6, act, scale)
    for event in flow["events"]:  # .grad accumulates over the two passes, as in the script
        net(torch.randn(8, 16) * scale).pow(2).mean().backward()
        for module, norm, mean in zip(flow["modules"], event["norm"], event["abs_mean"],
                                      strict=True):
            grads = [net.get_parameter(p).grad.flatten() for p in module["params"]]
            expected = torch.cat(grads)
            assert norm == pytest.approx(float(expected.norm()), rel=1e-5), module
            assert mean == pytest.approx(float(expected.abs().mean()), rel=1e-5), module
    # per parameter, across the passes: the same numbers, parameter by parameter
    weight = flow["params"]["0.weight"]["norm"]
    assert len(weight) == 2 and weight[1] == pytest.approx(
        float(net.get_parameter("0.weight").grad.norm()), rel=1e-5)


def test_vanishing_gradients_are_said_with_the_modules(trace_source):
    doc = trace_source(SIGMOIDS.format(depth=12, act="Sigmoid", scale=1.0))
    [finding] = diagnostics(doc, "vanishing_gradients")
    assert "backward #0 (and in 1 more backward passes)" in finding["message"]
    assert "`0` (the first module)" in finding["message"]
    assert "Smallest at `0`, `2`, `4`" in finding["message"]
    assert set(finding["params"]) == {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight",
                                      "4.bias"}
    assert not diagnostics(doc, "exploding_gradients")


def test_exploding_gradients_are_said(trace_source):
    doc = trace_source("""
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(*[nn.Linear(16, 16, bias=False) for _ in range(8)])
with torch.no_grad():  # a tiny first layer, the rest large: the signal back to it grows
    for i, layer in enumerate(net):
        layer.weight.mul_(4.0 if i else 1e-3)
net(torch.randn(4, 16)).pow(2).mean().backward()
""")
    [finding] = diagnostics(doc, "exploding_gradients")
    assert "larger near the input" in finding["message"]
    assert "Largest at `0`," in finding["message"] and "0.weight" in finding["params"]


def test_a_healthy_net_has_no_such_finding(trace_source):
    doc = trace_source(SIGMOIDS.format(depth=3, act="ReLU", scale=1.0))
    assert not diagnostics(doc, "vanishing_gradients")
    assert not diagnostics(doc, "exploding_gradients")


def test_a_big_models_values_stop_at_the_budget_and_its_statistics_do_not(trace_source):
    """250,000 numbers a run: past them a summary keeps min, max, mean, norm and mean |x|
    (enough for the gradient flow) without its values, and the run says so."""
    doc = trace_source("""
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(*[nn.Linear(60, 60) for _ in range(30)])
net(torch.randn(4, 60)).sum().backward()
""")
    assert doc["error"] is None, doc["error"]
    grads = [p["grad"] for p in doc["params"].values()]
    assert all("norm" in g and "abs_mean" in g for g in grads)
    assert any("values" not in g for g in grads) and any("values" in g for g in grads)
    [said] = diagnostics(doc, "values_dropped")
    assert "250,000 numbers" in said["message"]
    flow = gradient_flow(doc)
    assert all(n is not None for n in flow["events"][0]["norm"])
