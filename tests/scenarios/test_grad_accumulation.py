"""grad_accumulation: backward adds to .grad; zero_grad starts it again; micro-batches sum to
the full batch's gradient."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.trace_facts import backward_events, contribution_sum, values

PARAMS = ("weight", "bias")


def batch_gradients(plain, variant):
    """Each half-batch's gradient, and the full batch's, by plain autograd."""
    ns = plain("grad_accumulation", "--variant", variant)
    model = ns["model"]
    per_batch = [torch.autograd.grad(F.mse_loss(model(xb), yb), list(model.parameters()))
                 for xb, yb in ns["batches"]]
    full = torch.autograd.grad(F.mse_loss(model(ns["x"]), ns["y"]), list(model.parameters()))
    as_dict = lambda gs: {n: g.double() for n, g in zip(PARAMS, gs, strict=True)}  # noqa: E731
    return [as_dict(g) for g in per_batch], as_dict(full)


def test_without_zero_grad_the_second_backward_adds_to_the_first(traced, plain):
    first, second = backward_events(traced("grad_accumulation", "--variant", "no_zero_grad"))
    per_batch, _ = batch_gradients(plain, "no_zero_grad")
    for name in PARAMS:
        assert first["grads"][name]["before"] is None
        assert second["grads"][name]["before"] == first["grads"][name]["after"]
        before, after = (values(second["grads"][name][k]) for k in ("before", "after"))
        assert torch.allclose(after, before + contribution_sum(second, name), atol=1e-6)
        assert torch.allclose(after, per_batch[0][name] + per_batch[1][name], atol=1e-6)
        assert not torch.allclose(after, per_batch[1][name], atol=1e-6)


def test_with_zero_grad_each_backward_starts_from_none(traced, plain):
    events = backward_events(traced("grad_accumulation", "--variant", "zero_grad"))
    per_batch, _ = batch_gradients(plain, "zero_grad")
    for event, expected in zip(events, per_batch, strict=True):
        for name in PARAMS:
            assert event["grads"][name]["before"] is None
            after = values(event["grads"][name]["after"])
            assert torch.allclose(after, contribution_sum(event, name))
            assert torch.allclose(after, expected[name], atol=1e-6)


def test_scaled_micro_batches_accumulate_the_full_batch_gradient(traced, plain):
    first, second, check = backward_events(traced("grad_accumulation", "--variant",
                                                  "micro_batches"))
    _, full = batch_gradients(plain, "micro_batches")
    for name in PARAMS:
        assert torch.allclose(values(second["grads"][name]["after"]), full[name], atol=1e-6)
    # the script's own check, torch.autograd.grad on the whole batch, returns the same tensor
    # and leaves .grad alone
    assert check["call"] == "torch.autograd.grad"
    assert torch.allclose(values(check["results"][0]), full["weight"], atol=1e-6)
    for name in PARAMS:
        assert check["grads"][name]["before"] == check["grads"][name]["after"]
