"""A script that calls autograd nodes by hand (`y.grad_fn(g)`) made no backward pass: it is shown
as what it did, the graph its nodes belong to and a note naming the lines, never as a pass
autograd-lab ran itself (issue 24). app/trace/manual_nodes.py."""

from __future__ import annotations

import pytest
import torch

from app.trace.manual_nodes import HandCalls
from tests.trace_facts import backward_events, diagnostics

torchviz = pytest.importorskip("torchviz")

from tests.trace.test_torchviz_agreement import torchviz_walk  # noqa: E402

BY_HAND = """\
import torch
w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
x = torch.tensor([4.0, 5.0, 0.5])
y = (w * x).tanh().sum()
g = y.grad_fn(torch.tensor(1.0))
print(g.tolist())
h = y.grad_fn.next_functions[0][0](g)
print(h.tolist())
fn = y.grad_fn
print(fn(torch.ones(())).tolist())
"""


def test_hand_calls_are_shown_as_their_graph_not_as_a_pass(trace_source):
    doc = trace_source(BY_HAND)
    assert doc["error"] is None, doc["error"]
    assert backward_events(doc) == []  # no backward ran, so none is drawn
    [view] = doc["views"]
    assert view["kind"] == "manual_nodes" and view["event"] is None
    # the view is the graph of `y`, node for node and edge for edge as torchviz walks it
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    x = torch.tensor([4.0, 5.0, 0.5])
    y = (w * x).tanh().sum()
    tv_names, tv_edges = torchviz_walk(y)
    nodes = [n for n in view["graph"]["nodes"] if n["kind"] != "output"]
    assert sorted(n["name"] for n in nodes) == sorted(tv_names.elements())
    by_id = {n["id"]: n["name"] for n in nodes}
    ours = sorted((by_id[e["source"]], by_id[e["target"]]) for e in view["graph"]["edges"]
                  if e["target"] in by_id)
    assert len(ours) == sum(tv_edges.values()) == 3
    assert {n["param"] for n in nodes if n["kind"] in ("leaf", "param")} == {"w"}
    # the script's printed gradients are torch's own: each node's local gradient
    out = [eval(line) for line in doc["stdout"].splitlines()]
    assert out[0] == [1.0, 1.0, 1.0] and out[2] == [1.0, 1.0, 1.0]  # SumBackward0 of ones
    u = (w * x).detach().requires_grad_()
    (d_tanh,) = torch.autograd.grad(u.tanh().sum(), u)  # what TanhBackward0 gives for ones
    assert torch.equal(torch.tensor(out[1]), d_tanh)
    # the note names the lines that call nodes, and says no pass ran
    [note] = diagnostics(doc, "manual_nodes")
    assert "at lines 5, 7 and 10" in note["message"]
    assert "no backward pass ran" in note["message"] and "shown as a view" in note["message"]
    assert not any(e.get("synthetic") for e in doc["events"])


def test_hand_calls_beside_a_real_backward_keep_the_one_real_pass(trace_source):
    doc = trace_source("""\
        import torch
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        y = (w * w).sum()
        print(y.grad_fn(torch.tensor(2.0)).tolist())
        y.backward()
        print(w.grad.tolist())
        """)
    assert doc["error"] is None, doc["error"]
    [event] = backward_events(doc)
    assert not event.get("synthetic") and event["line"] == 5
    assert doc.get("views", []) == []  # the real pass is the picture
    assert doc["stdout"].splitlines() == ["[2.0, 2.0]", "[2.0, 4.0]"]
    [note] = diagnostics(doc, "manual_nodes")
    assert "at line 4:" in note["message"] and "no backward pass ran" not in note["message"]


def test_a_script_with_no_hand_call_still_gets_its_chosen_root():
    """The synthetic pass of a script that only builds a graph is not this module's to stop."""
    assert not HandCalls.in_source("import torch\ny = torch.ones(2, requires_grad=True) * 2\n")


@pytest.mark.parametrize(("source", "lines", "bases"), [
    ("f = y.grad_fn\nf(g)\n", [2], ["y"]),
    ("nf = y.grad_fn.next_functions\nnf[0][0](g)\n", [2], ["y"]),
    ("for fn, _ in y.grad_fn.next_functions:\n    fn(g)\n", [2], ["y"]),
    ("pair = y.grad_fn.next_functions[1]\npair[0](g)\n", [2], ["y"]),
    ("(a * b).grad_fn(g)\n", [1], []),
    # not calls of a node: its methods, its attributes, a tensor's own calls
    ("y.grad_fn.name()\ny.grad_fn.register_hook(h)\nprint(y.grad_fn.next_functions)\n"
     "y.backward()\n", [], []),
])
def test_hand_calls_are_found_however_the_node_is_reached(source, lines, bases):
    found = HandCalls.in_source(source)
    assert found.lines == lines and found.bases == bases


def test_a_node_held_in_a_name_finds_the_tensor_whose_graph_holds_it(trace_source):
    doc = trace_source("""\
        import torch
        a = torch.ones(3, requires_grad=True)
        def make():
            return (a * 3).exp().mean()
        z = make()
        other = (a + 1).sum()
        node = (z * 2).grad_fn.next_functions[0][0]  # z's own grad_fn, reached from a product
        print(node(torch.ones(())).tolist())
        """)
    assert doc["error"] is None, doc["error"]
    [view] = doc["views"]
    names = {n["name"] for n in view["graph"]["nodes"]}
    assert {"MeanBackward0", "ExpBackward0", "MulBackward0"} <= names  # z's graph, not other's
    assert "AddBackward0" not in names
    assert torch.allclose(torch.tensor(eval(doc["stdout"])), torch.full((3,), 1 / 3))
    [note] = diagnostics(doc, "manual_nodes")
    assert "at line 8:" in note["message"]


def test_a_script_too_deep_to_compile_keeps_its_own_error(trace_source):
    """A line of 5000 terms is too deep for Python's parser: the script's own compile() fails
    (a RecursionError here) and that is the run's error record; the search for hand calls,
    which parses the same source, must not turn it into an exception of the tracer's."""
    source = ("import torch\nx = torch.ones(1, requires_grad=True)\n(x * 2).sum().backward()\n"
              "y = " + "+".join(["1"] * 5000) + "\nprint('ran')\n")
    with pytest.raises((RecursionError, MemoryError)) as untraced:
        compile(source, "deep.py", "exec")
    doc = trace_source(source)
    assert doc["error"]["type"] == untraced.type.__name__
    assert doc["stdout"] == "" and backward_events(doc) == []  # not one line of it ran
    assert HandCalls.in_source(source).lines == []
