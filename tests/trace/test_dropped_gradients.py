"""A gradient autograd dropped is recorded as dropped: a leaf whose requires_grad the script
switched off after the forward pass and before the backward gets nothing from its uses (its
AccumulateGrad drops it), and the Trace says so with the line that switched it off. Checked
against plain PyTorch's `.grad`."""

from __future__ import annotations

import textwrap

GAN_STEP = """
import torch
torch.manual_seed(0)
G = torch.nn.Linear(2, 2)
D = torch.nn.Linear(2, 1)
fake = G(torch.randn(4, 2))
score = D(fake).mean()
for p in D.parameters():
    p.requires_grad_(False)  # D frozen after its forward, before the generator's backward
G_loss = -score
G_loss.backward()
"""


def plain(code: str) -> dict:
    namespace: dict = {}
    exec(compile(textwrap.dedent(code), "<plain>", "exec"), namespace)  # noqa: S102
    return namespace


def test_a_frozen_discriminators_gradient_is_dropped_and_said_so(trace_source):
    ran = plain(GAN_STEP)
    assert ran["D"].weight.grad is None and ran["G"].weight.grad is not None  # PyTorch's facts
    doc = trace_source(GAN_STEP)
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    assert sorted(event["dropped"]) == ["D.bias", "D.weight"]
    assert event["grads"]["D.weight"]["after"] is None
    assert "G.weight" not in event["dropped"] and event["grads"]["G.weight"]["after"]
    found = [d for d in doc["diagnostics"] if d["code"] == "dropped_gradient"]
    assert {tuple(d["params"]) for d in found} == {("D.weight",), ("D.bias",)}
    assert all("line 9 switched its `requires_grad` off" in d["message"] and "stayed None" in
               d["message"] for d in found)


def test_switched_off_by_assignment_and_kept_its_earlier_value(trace_source):
    code = """
        import torch
        w = torch.nn.Parameter(torch.ones(2))
        (w * 2).sum().backward()
        y = (w * 3).sum()
        w.requires_grad = False
        y.backward()
    """
    assert plain(code)["w"].grad.tolist() == [2.0, 2.0]  # the first pass's, nothing added
    doc = trace_source(code)
    second = [e for e in doc["events"] if e["kind"] == "backward"][1]
    assert second["dropped"] == ["w"]
    assert second["grads"]["w"]["after"]["values"] == [2.0, 2.0]
    (found,) = [d for d in doc["diagnostics"] if d["code"] == "dropped_gradient"]
    assert "line 6 switched its `requires_grad` off" in found["message"]
    assert "kept its earlier value" in found["message"]


def test_autograd_grad_returns_a_gradient_and_drops_nothing(trace_source):
    code = """
        import torch
        w = torch.nn.Parameter(torch.ones(2))
        y = (w * 3).sum()
        (g,) = torch.autograd.grad(y, [w])
    """
    doc = trace_source(code)
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    assert "dropped" not in event


def test_a_leaf_used_with_grad_but_never_reached_is_not_blamed_on_no_grad(trace_source):
    """Read under no_grad for a metric, and used with grad on in a loss that was never given
    to backward: the finding once named only the no_grad line."""
    code = """
        import torch
        w = torch.ones(2, requires_grad=True)
        b = torch.ones(2, requires_grad=True)
        with torch.no_grad():
            metric = (w * 2).sum()
        forgotten = (w * 3).sum()
        (b * 2).sum().backward()
    """
    assert plain(code)["w"].grad is None  # PyTorch: no gradient for w
    doc = trace_source(code)
    (found,) = [d for d in doc["diagnostics"] if d["code"] == "no_gradient"]
    assert found["params"] == ["w"]
    assert "used with grad on at line 7, but no backward pass reached" in found["message"]
    assert "under `torch.no_grad()` (line 6)" in found["message"]


def test_a_gradient_from_a_reentrant_checkpoints_inner_backward_is_not_called_unused(trace_source):
    """Reentrant checkpoint accumulates the weights' gradients in a backward of its own, inside
    the script's: the page once said "uses 0" and ".grad keeps its earlier value" although
    .grad went from None to a value."""
    code = """
        import torch
        from torch.utils.checkpoint import checkpoint
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 3)
        x = torch.randn(2, 3, requires_grad=True)
        y = checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True)
        y.sum().backward()
    """
    ran = plain(code)
    assert ran["lin"].weight.grad is not None  # PyTorch: the weight got its gradient
    doc = trace_source(code)
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    assert sorted(event["inner"]) == ["bias", "weight"] and event["nested"] == 1
    assert event["grads"]["weight"]["before"] is None and event["grads"]["weight"]["after"]
    import torch

    got = torch.tensor(event["grads"]["weight"]["after"]["values"])
    assert torch.allclose(got, ran["lin"].weight.grad, atol=1e-6)


def test_a_plain_backward_has_no_inner_pass(trace_source):
    doc = trace_source("""
        import torch
        w = torch.ones(2, requires_grad=True)
        (w * 2).sum().backward()
    """)
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    assert "inner" not in event and "nested" not in event
