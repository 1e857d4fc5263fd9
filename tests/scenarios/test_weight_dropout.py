"""weight_dropout: `.data` cuts the raw weight off; dropping out `raw_w` sends it the gradient
through the mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.scenarios.helpers import flagged, line_of, node_by_id
from tests.trace_facts import backward_events, values

RAW = ["rnn.weight_hh_l0_raw", "head.weight_raw"]


def test_data_variant_raw_weights_get_no_gradient_and_the_diagnostic_names_them(traced, plain):
    doc = traced("weight_dropout", "--variant", "data")
    (event,) = backward_events(doc)
    no_grad = flagged(doc, "no_gradient")
    data_line = line_of("weight_dropout", "F.dropout(raw_w.data")
    for name in RAW:
        assert doc["params"][name]["requires_grad"]
        assert doc["params"][name]["grad"] is None
        assert doc["params"][name]["uses"] == {"0": 0}
        assert name not in event["uses"]
        assert "`.data`" in no_grad[name] and f"line {data_line}" in no_grad[name]
    # the rest of the model still learns: only the raw weights are cut off
    assert set(no_grad) == set(RAW)
    assert event["grads"]["rnn.module.weight_ih_l0"]["after"] is not None
    ns = plain("weight_dropout", "--variant", "data")  # torch agrees
    assert ns["model"].rnn.weight_hh_l0_raw.grad is None
    assert ns["model"].head.weight_raw.grad is None


def gradients_through_the_mask(plain):
    """The raw weights' gradient, computed here from the dropped weights the run used:
    d loss/d raw = (d loss/d dropped) * mask / (1 - p)."""
    ns = plain("weight_dropout", "--variant", "fixed")
    model, x, y, p = ns["model"], ns["x"], ns["y"], ns["P"]
    lstm, head = model.rnn.module, model.head.module
    dropped = {"rnn.weight_hh_l0_raw": lstm.weight_hh_l0.detach().requires_grad_(),
               "head.weight_raw": head.weight.detach().requires_grad_()}
    lstm.weight_hh_l0, head.weight = dropped["rnn.weight_hh_l0_raw"], dropped["head.weight_raw"]
    out, _ = lstm(x)
    loss = F.mse_loss(head(out[:, -1]), y)
    grads = torch.autograd.grad(loss, list(dropped.values()))
    kept = {name: d != 0 for name, d in dropped.items()}  # where the weight was not dropped
    expected = {name: (g * kept[name] / (1 - p)).double()
                for name, g in zip(dropped, grads, strict=True)}
    return expected, kept


def test_fixed_variant_gradient_reaches_raw_through_the_mask(traced, plain):
    doc = traced("weight_dropout", "--variant", "fixed")
    (event,) = backward_events(doc)
    expected, kept = gradients_through_the_mask(plain)
    dropout_line = line_of("weight_dropout", "F.dropout(raw_w, ")
    for name in RAW:
        grad = values(doc["params"][name]["grad"])
        assert 0 < (~kept[name]).sum() < kept[name].numel()  # some dropped, some kept
        assert torch.equal(grad == 0, ~kept[name])  # zero exactly where dropped
        assert torch.allclose(grad, expected[name], atol=1e-6)  # scaled by 1/(1-p)
        (use,) = event["contributions"][name]
        assert node_by_id(event, use["node"])["line"] == dropout_line  # through the dropout
    assert not flagged(doc, "no_gradient")


def test_by_hand_assigned_tensors_equal_matmul_plus_bias_and_route_the_gradient(traced, plain):
    ns = plain("weight_dropout", "--variant", "by_hand")
    assert torch.allclose(ns["out"], ns["by_hand"])
    assert not list(ns["linear"].parameters())  # the Linear owns no parameter any more
    doc = traced("weight_dropout", "--variant", "by_hand")
    (event,) = backward_events(doc)
    assert set(event["uses"]) == {"weight", "bias"}
    for name in ("weight", "bias"):
        kept = getattr(ns["linear"], name) != 0
        grad = values(doc["params"][name]["grad"])
        assert torch.equal(grad == 0, ~kept)


@pytest.mark.parametrize("variant", ["data", "fixed"])
def test_the_lstm_weight_moved_to_raw(traced, variant):
    params = traced("weight_dropout", "--variant", variant)["params"]
    assert "rnn.weight_hh_l0_raw" in params and "rnn.module.weight_hh_l0" not in params
    assert params["rnn.weight_hh_l0_raw"]["shape"] == [16, 4]  # 4 gates x hidden 4, hidden 4
