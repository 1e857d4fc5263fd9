"""no_grad_inference_detach: three ways to freeze an encoder; the head learns the same in all
three, the encoder never gets a gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.scenarios.helpers import flagged
from tests.trace_facts import backward_events, values

VARIANTS = ["no_grad", "inference_mode", "detach"]
ENCODER = ["encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias"]
HEAD = ["head.weight", "head.bias"]


def head_gradients(plain):
    ns = plain("no_grad_inference_detach", "--variant", "no_grad")
    encoder, head, x, y = ns["encoder"], ns["head"], ns["x"], ns["y"]
    features = encoder(x).detach()
    w, b = (t.detach().clone().requires_grad_() for t in (head.weight, head.bias))
    grads = torch.autograd.grad(F.mse_loss(F.linear(features, w, b), y), [w, b])
    return {n: g.double() for n, g in zip(HEAD, grads, strict=True)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_graph_stops_at_the_features(traced, plain, variant):
    doc = traced("no_grad_inference_detach", "--variant", variant)
    (event,) = backward_events(doc)
    assert set(event["uses"]) == set(HEAD)
    no_grad = flagged(doc, "no_gradient")
    for name in ENCODER:
        assert doc["params"][name]["requires_grad"] and doc["params"][name]["grad"] is None
        assert name in no_grad
    expected = head_gradients(plain)
    for name in HEAD:
        assert torch.allclose(values(doc["params"][name]["grad"]), expected[name], atol=1e-6)
    assert not plain("no_grad_inference_detach", "--variant", variant)["features"].requires_grad


@pytest.mark.parametrize("variant", ["no_grad", "inference_mode"])
def test_the_diagnostic_names_the_context_that_read_the_encoder(traced, variant):
    doc = traced("no_grad_inference_detach", "--variant", variant)
    for message in (flagged(doc, "no_gradient")[name] for name in ENCODER):
        assert f"torch.{variant}()" in message


def test_inference_tensors_cannot_be_saved_for_backward(traced):
    doc = traced("no_grad_inference_detach", "--variant", "inference_mode")
    assert "Inference tensors cannot be saved for backward" in doc["stdout"]


def test_the_diagnostic_names_the_detach(traced):
    doc = traced("no_grad_inference_detach", "--variant", "detach")
    for message in (flagged(doc, "no_gradient")[name] for name in ENCODER):
        assert "detach()" in message
