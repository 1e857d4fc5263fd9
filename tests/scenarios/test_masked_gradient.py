"""masked_gradient: a custom Function whose backward keeps the weight gradient only in chosen
input columns; gradcheck says it is (deliberately) not the true gradient."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.scenarios.helpers import edges, method_source, node_by_id, nodes_named
from tests.trace_facts import backward_events, diagnostics, values


def true_gradients(plain):
    """The true gradients of the same loss, by plain autograd on F.linear."""
    ns = plain("masked_gradient")
    layer, x, target = ns["layer"], ns["x"], ns["target"]
    w, b = (t.detach().clone().requires_grad_() for t in (layer.weight, layer.bias))
    gw, gb = torch.autograd.grad(F.mse_loss(F.linear(x, w, b), target), [w, b])
    return gw.double(), gb.double(), layer.columns


def test_weight_gradient_is_the_true_gradient_in_the_chosen_columns_and_zero_elsewhere(
        traced, plain):
    doc = traced("masked_gradient")
    grad = values(doc["params"]["weight"]["grad"])
    true, true_bias, columns = true_gradients(plain)
    others = [c for c in range(grad.shape[1]) if c not in columns.tolist()]
    assert 0 < len(columns) < grad.shape[1]
    assert torch.allclose(grad[:, columns], true[:, columns], atol=1e-6)
    assert torch.equal(grad[:, others], torch.zeros_like(grad[:, others]))
    assert (true[:, others] != 0).all()  # the mask really removed something
    assert torch.allclose(values(doc["params"]["bias"]["grad"]), true_bias, atol=1e-6)


def test_the_custom_node_takes_the_place_of_addmm_with_edges_to_weight_and_bias_only(traced):
    event = backward_events(traced("masked_gradient"))[0]
    (node,) = nodes_named(event, "MaskedLinearBackward")
    assert node["kind"] == "custom" and node["function"] == "MaskedLinear"
    assert not nodes_named(event, "AddmmBackward0")
    reached = {node_by_id(event, e["source"]).get("param") for e in edges(event,
                                                                            target=node["id"])}
    assert reached == {"weight", "bias"}  # not x (no grad) and not the column indices
    line, source = method_source("masked_gradient", "MaskedLinear", "backward")
    assert node["backward_source"]["line"] == line
    assert source in node["backward_source"]["source"]


def test_gradcheck_reports_the_backward_is_not_the_true_gradient(traced):
    doc = traced("masked_gradient")
    event = backward_events(doc)[0]
    (node,) = nodes_named(event, "MaskedLinearBackward")
    assert node["gradcheck"]["passed"] is False
    (diag,) = diagnostics(doc, "gradcheck_failed")
    assert node["id"] in diag["nodes"] and "MaskedLinear" in diag["message"]
