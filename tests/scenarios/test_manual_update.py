"""manual_update: an update by hand works under no_grad and is refused while recording."""

from __future__ import annotations

import torch

from tests.trace_facts import backward_events, values


def test_under_no_grad_the_weights_move_and_each_grad_is_fresh(traced, plain):
    doc = traced("manual_update", "--variant", "no_grad")
    events = backward_events(doc)
    assert doc["error"] is None and len(events) == 3
    ns = plain("manual_update", "--variant", "no_grad")
    assert ns["w"].is_leaf and ns["w"].requires_grad  # still a leaf after three updates
    for e in events:
        # .grad after each backward is that backward's gradient alone: it was zeroed before
        before = e["grads"]["w"]["before"]
        assert before is None or not values(before).any()
        assert torch.allclose(values(e["grads"]["w"]["after"]),
                              values(e["contributions"]["w"][0]["grad"]))
    # the weight changed between the passes: the gradients differ
    first, last = (values(e["grads"]["w"]["after"]) for e in (events[0], events[-1]))
    assert not torch.allclose(first, last)


def test_recorded_the_update_is_refused(traced, plain):
    doc = traced("manual_update", "--variant", "recorded")
    assert len(backward_events(doc)) == 1  # the first update already fails
    assert "the update was refused: a leaf Variable that requires grad" in doc["stdout"]
    ns = plain("manual_update", "--variant", "recorded")
    # nothing changed the weight: it is the seed's, and its .grad is the first backward's
    torch.manual_seed(0)
    assert torch.equal(ns["w"].detach(), torch.randn(3))
