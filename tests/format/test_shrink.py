"""A Trace past the report bound is made smaller, not refused (issue 24): values first, then the
later backward passes, then the nodes of a graph past a bound, each step said; what is left is
still a valid Trace. Checked on a real trace of a graph of thousands of nodes."""

from __future__ import annotations

import copy

import pytest

from app.format import validate
from app.format.shrink import shrink_to, size_of
from tests.trace_facts import backward_events

# a target built from many elementwise ops on a tensor that requires grad, three passes
BIG = """
import torch
x = torch.randn(64, requires_grad=True)
y = x
for _ in range(3000):
    y = y * 1.0001 + 0.0001
for _ in range(3):
    y.sum().backward(retain_graph=True)
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    from app.trace.tracer import trace_script

    path = tmp_path_factory.mktemp("big") / "script.py"
    path.write_text(BIG)
    doc = trace_script(path)
    assert doc["error"] is None and len(backward_events(doc)) == 3
    return doc


def _shrunk(doc: dict) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["code"] == "trace_shrunk"]


def test_a_trace_within_the_bound_is_left_as_it_is(big):
    doc = copy.deepcopy(big)
    assert shrink_to(doc, size_of(doc)) is doc and not _shrunk(doc)


def test_values_go_first_and_the_statistics_stay(big):
    doc = copy.deepcopy(big)
    with_values = size_of(doc)
    shrink_to(doc, with_values - 1)
    (said,) = _shrunk(doc)
    assert "the tensors' values" in said["message"] and "after the first" not in said["message"]
    assert len(backward_events(doc)) == 3
    grad = backward_events(doc)[0]["grads"]["x"]["after"]
    assert "values" not in grad and grad["norm"] > 0
    validate(doc)


def test_then_the_later_passes_then_the_nodes_and_the_trace_stays_valid(big, monkeypatch):
    from app.format import shrink

    monkeypatch.setattr(shrink, "NODES_KEPT", 1000)  # the graph here has 6,003
    doc = copy.deepcopy(big)
    shrink_to(doc, 200_000)
    (said,) = _shrunk(doc)
    assert "2 backward passes after the first" in said["message"]
    assert doc["events_skipped"]["backward"] == 2
    (event,) = backward_events(doc)
    nodes = {n["id"] for n in event["graph"]["nodes"]}
    assert all(e["source"] in nodes and e["target"] in nodes for e in event["graph"]["edges"])
    assert set(event["order"]) <= nodes
    assert len(nodes) <= 1000 and event["graph"]["truncated"]  # fewer where the bound needs
    assert f"{6003 - len(nodes):,} nodes of the graph past the first {len(nodes):,}" \
        in said["message"]
    assert event["graph"]["roots"]  # the walk starts at the root: it is kept
    validate(doc)
    assert size_of(doc) < size_of(big) / 10  # (past every step, the supervisor refuses it)


def test_the_compiled_regions_graphs_go_before_any_pass(big):
    """A Trace whose compiled regions' graphs take it past the bound loses them (the nodes say
    their region, which the page then says was not kept), and keeps its passes."""
    doc = copy.deepcopy(big)
    op = {"id": "sin_1", "op": "aten.sin.default", "inputs": ["sin"]}
    graph = {"ops": [op] * 2000, "op_count": 2000, "inputs": ["primals_1"]}
    doc["compiled_regions"] = [{"id": i, "forward": graph, "backward": None} for i in range(16)]
    validate(doc)
    shrink_to(doc, size_of(big))
    (said,) = _shrunk(doc)
    assert "compiled regions" in said["message"] and "after the first" not in said["message"]
    assert "compiled_regions" not in doc and len(backward_events(doc)) == 3
    validate(doc)
