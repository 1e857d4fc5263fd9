"""retain_graph: the first backward frees the saved tensors; the second then fails, unless the
first kept them."""

from __future__ import annotations

import torch

from tests.trace_facts import backward_events, values

PARAMS = ("weight", "bias")


def saved_tensors(event):
    """{(node id, saved name): entry} for every saved tensor (not plain values) of a graph."""
    return {(n["id"], s["name"]): s for n in event["graph"]["nodes"]
            for s in n.get("saved", ()) if "shape" in s or s.get("freed")}


def test_without_retain_graph_the_second_backward_finds_the_saved_tensors_freed(traced, plain):
    doc = traced("retain_graph", "--variant", "without")
    first, second = backward_events(doc)
    assert first["error"] is None
    assert second["error"]["type"] == "RuntimeError"
    assert "second time" in second["error"]["message"]
    before, after = saved_tensors(first), saved_tensors(second)
    assert before and not any(s.get("freed") for s in before.values())
    assert set(after) == set(before)  # the same nodes, the same saved slots...
    assert all(s.get("freed") for s in after.values())  # ...all freed
    for name in PARAMS:  # the failed pass added nothing
        assert second["grads"][name]["after"] == first["grads"][name]["after"]
    ns = plain("retain_graph", "--variant", "without")
    assert torch.equal(ns["model"].weight.grad, ns["first"])


def test_with_retain_graph_the_second_backward_works_and_doubles_grad(traced):
    first, second = backward_events(traced("retain_graph", "--variant", "with"))
    assert first["error"] is None and second["error"] is None
    assert not any(s.get("freed") for s in saved_tensors(second).values())
    assert second["order"] == first["order"]
    for name in PARAMS:
        once = values(first["grads"][name]["after"])
        assert torch.allclose(values(second["grads"][name]["after"]), 2 * once)
