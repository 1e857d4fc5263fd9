"""stop_gradient: the weight learns from the first use only, and the gradient still flows
back through the second use; no_grad is not a way to do it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.scenarios.helpers import edges, flagged, line_of, node_by_id, nodes_named
from tests.trace_facts import backward_events, contribution_sum, diagnostics, values

W = "linear.weight"
FIRST_USE = line_of("stop_gradient", "# first use")


def partial_gradients(plain, variant):
    """(first use's term, second use's term) of the weight's gradient, computed here: the two
    uses read separate copies of the weight, and torch differentiates with respect to each."""
    ns = plain("stop_gradient", "--variant", variant)
    linear, x, target = ns["model"].linear, ns["x"], ns["target"]
    w1, b1, w2, b2 = (t.detach().clone().requires_grad_()
                      for t in (linear.weight, linear.bias, linear.weight, linear.bias))
    out = F.linear(torch.tanh(F.linear(x, w1, b1)), w2, b2)
    g1, g2 = torch.autograd.grad(F.mse_loss(out, target), [w1, w2])
    return g1.double(), g2.double()


@pytest.mark.parametrize("variant", ["requires_grad", "detach"])
def test_weight_gradient_is_the_first_use_alone(traced, plain, variant):
    doc = traced("stop_gradient", "--variant", variant)
    (event,) = backward_events(doc)
    assert event["error"] is None
    assert event["uses"][W] == 1 and event["uses"]["linear.bias"] == 1
    (use,) = event["contributions"][W]
    assert node_by_id(event, use["node"])["line"] == FIRST_USE
    after = values(event["grads"][W]["after"])
    assert torch.allclose(values(use["grad"]), after)
    first, second = partial_gradients(plain, variant)
    assert torch.allclose(after, first, atol=1e-6)
    assert not torch.allclose(after, first + second, atol=1e-6)  # the second term is missing


@pytest.mark.parametrize("variant", ["requires_grad", "detach"])
def test_gradient_still_flows_back_through_the_second_use(traced, variant):
    event = backward_events(traced("stop_gradient", "--variant", variant))[0]
    (tanh,) = nodes_named(event, "TanhBackward0")
    (into_second_use,) = edges(event, source=tanh["id"])  # h is read by the second use only
    second = node_by_id(event, into_second_use["target"])
    assert second["line"] != FIRST_USE
    assert into_second_use["grad_norm"] > 0
    # the second use reads the weight's values (it saved them) but has no edge into the weight
    assert any(s.get("param") == W for s in second["saved"])
    reached = {node_by_id(event, e["source"]).get("param") for e in edges(event,
                                                                            target=second["id"])}
    assert W not in reached and "linear.bias" not in reached


def test_both_uses_sum_and_the_first_term_is_what_the_stopped_variants_get(traced, plain):
    event = backward_events(traced("stop_gradient", "--variant", "both_uses"))[0]
    assert event["uses"][W] == 2
    terms = {node_by_id(event, u["node"])["line"]: values(u["grad"])
             for u in event["contributions"][W]}
    first, second = partial_gradients(plain, "both_uses")
    assert torch.allclose(terms.pop(FIRST_USE), first, atol=1e-6)
    (other,) = terms.values()
    assert torch.allclose(other, second, atol=1e-6)
    assert torch.allclose(contribution_sum(event, W), values(event["grads"][W]["after"]))
    stopped = backward_events(traced("stop_gradient", "--variant", "detach"))[0]
    assert torch.allclose(values(stopped["grads"][W]["after"]), first, atol=1e-6)


def test_no_grad_leaves_nothing_to_go_back_through(traced, plain):
    doc = traced("stop_gradient", "--variant", "no_grad")
    (event,) = backward_events(doc)
    assert event["error"]["type"] == "RuntimeError"
    assert "does not require grad" in event["error"]["message"]
    assert event["contributions"] == {} and event["order"] == []
    (diag,) = diagnostics(doc, "output_without_grad_fn")
    assert diag["event"] == event["index"]
    messages = flagged(doc, "no_gradient")
    for name in (W, "linear.bias"):
        assert doc["params"][name]["grad"] is None  # the first use receives nothing either
        assert "no_grad" in messages[name]
    ns = plain("stop_gradient", "--variant", "no_grad")
    assert ns["out"].grad_fn is None and ns["model"].linear.weight.grad is None
