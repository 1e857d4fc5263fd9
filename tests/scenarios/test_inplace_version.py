"""inplace_version: modifying tanh's saved output in place stops the backward at
TanhBackward0 with the version-counter error; multiplying by a mask does not."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.scenarios.helpers import line_of, nodes_named
from tests.trace_facts import backward_events, values


def test_inplace_change_stops_backward_at_tanh_with_the_version_error(traced, plain):
    doc = traced("inplace_version", "--variant", "inplace")
    (event,) = backward_events(doc)
    error = event["error"]
    assert error["type"] == "RuntimeError"
    assert "modified by an inplace operation" in error["message"]
    assert "is at version 1; expected version 0" in error["message"]
    (tanh,) = nodes_named(event, "TanhBackward0")
    (copy,) = nodes_named(event, "CopySlices")
    assert copy["line"] == line_of("inplace_version", "h[:, 0] = 0  # in place")
    assert event["order"][-1] == tanh["id"]  # the engine got as far as tanh, no further
    assert event["contributions"] == {}
    for name in ("weight", "bias"):
        assert doc["params"][name]["grad"] is None
    assert plain("inplace_version", "--variant", "inplace")["h"]._version == 1


def test_the_saved_output_is_shown_modified_not_freed(traced):
    event = backward_events(traced("inplace_version", "--variant", "inplace"))[0]
    (tanh,) = nodes_named(event, "TanhBackward0")
    (result,) = [s for s in tanh["saved"] if s["name"] == "result"]
    assert not result.get("freed")


def test_multiplying_by_a_mask_keeps_the_saved_output_and_the_gradients_arrive(traced, plain):
    doc = traced("inplace_version", "--variant", "fixed")
    (event,) = backward_events(doc)
    assert event["error"] is None
    assert not nodes_named(event, "CopySlices") and nodes_named(event, "MulBackward0")
    ns = plain("inplace_version", "--variant", "fixed")
    layer, x = ns["layer"], ns["x"]
    w, b = (t.detach().clone().requires_grad_() for t in (layer.weight, layer.bias))
    h = torch.tanh(F.linear(x, w, b))
    keep = torch.tensor([0.0, 1.0, 1.0, 1.0])
    gw, gb = torch.autograd.grad((h * keep).pow(2).sum(), [w, b])
    grad = values(doc["params"]["weight"]["grad"])
    assert torch.allclose(grad, gw.double(), atol=1e-6)
    assert torch.allclose(values(doc["params"]["bias"]["grad"]), gb.double(), atol=1e-6)
    assert torch.equal(grad[0], torch.zeros(3, dtype=grad.dtype))  # unit 0 was zeroed
    assert (grad[1:] != 0).all()
