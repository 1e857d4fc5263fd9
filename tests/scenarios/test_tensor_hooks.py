"""tensor_hooks: a hook on h halves the gradient below h and leaves everything above alone."""

from __future__ import annotations

import pytest
import torch

from tests.scenarios.helpers import edges, nodes_named
from tests.trace_facts import backward_events, values


@pytest.fixture(scope="module")
def both(traced):
    return (traced("tensor_hooks", "--variant", "halve"),
            traced("tensor_hooks", "--variant", "no_hook"))


def grad(doc, name):
    return values(doc["params"][name]["grad"])


def test_layers_below_the_hook_get_half_the_gradient(both):
    hooked, plain_run = both
    for name in ("first.weight", "first.bias"):
        assert torch.allclose(grad(hooked, name), 0.5 * grad(plain_run, name), atol=1e-7)
        assert grad(plain_run, name).abs().sum() > 0


def test_layers_above_the_hook_are_untouched(both):
    hooked, plain_run = both
    for name in ("second.weight", "second.bias"):
        assert torch.equal(grad(hooked, name), grad(plain_run, name))


def test_the_edge_carrying_dl_dh_is_unchanged_and_the_edges_below_are_halved(both):
    def norms(doc):
        event = backward_events(doc)[0]
        (relu,) = nodes_named(event, "ReluBackward0")
        (into,) = edges(event, source=relu["id"])  # dL/dh, as the second layer sends it
        (below,) = edges(event, target=relu["id"])  # what relu's backward sends on
        return into["grad_norm"], below["grad_norm"]

    (into_hooked, below_hooked), (into_plain, below_plain) = (norms(d) for d in both)
    assert into_hooked == pytest.approx(into_plain)
    assert below_hooked == pytest.approx(0.5 * below_plain)


def test_the_forward_pass_is_unchanged_and_torch_agrees(plain, both):
    runs = {v: plain("tensor_hooks", "--variant", v) for v in ("halve", "no_hook")}
    assert torch.equal(runs["halve"]["loss"], runs["no_hook"]["loss"])
    for ns, doc in zip(runs.values(), both, strict=True):
        assert torch.allclose(ns["model"].first.weight.grad.double(), grad(doc, "first.weight"))


def test_a_hook_on_the_parameter_is_a_share_of_its_own_and_the_bars_add_up(traced):
    doc = traced("tensor_hooks", "--variant", "leaf_hook")
    (event,) = backward_events(doc)
    (share,) = event["hooks"]["first.weight"]
    assert share["kind"] == "hook" and share["lines"]
    clipped = grad(doc, "first.weight")
    assert clipped.abs().max() <= 0.05 + 1e-7  # what the hook did, as torch left it
    uses = sum(values(u["grad"]) for u in event["contributions"]["first.weight"])
    assert torch.allclose(uses + values(share["grad"]), clipped, atol=1e-6)
    assert (values(share["grad"]) != 0).any()  # the clamp cut something
