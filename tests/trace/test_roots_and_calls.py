"""Which tensor is the root, and each way a script can ask for gradients."""

from __future__ import annotations

import json

import torch

from app.format import validate
from app.format.json_text import dumps
from tests.trace_facts import backward_events, diagnostics, values


def test_no_backward_takes_last_module_level_tensor(trace_source):
    doc = trace_source("""
        import torch
        w = torch.randn(3, requires_grad=True)
        a = (w * 2).sum()
        b = (w ** 2).sum()     # the last one with a grad_fn
        c = torch.zeros(2)     # no grad_fn: not a candidate
        print(w.tolist())
    """)
    assert doc["error"] is None
    (event,) = backward_events(doc)
    assert event["synthetic"] is True
    out = event["graph"]["nodes"][0]
    assert out["kind"] == "output" and out["label"] == "b"
    assert {n["name"] for n in event["graph"]["nodes"]} >= {"PowBackward0", "SumBackward0"}
    assert "MulBackward0" not in {n["name"] for n in event["graph"]["nodes"]}
    (diag,) = diagnostics(doc, "root_chosen")
    assert "`b`" in diag["message"]
    w = torch.tensor(eval(doc["stdout"]), dtype=torch.float64)
    assert torch.allclose(values(event["grads"]["w"]["after"]), 2 * w)  # d(sum w^2)/dw


def test_output_name_wins(trace_source):
    doc = trace_source("""
        import torch
        w = torch.randn(3, requires_grad=True)
        OUTPUT = (w * 2).sum()
        later = (w ** 2).sum()
    """)
    (event,) = backward_events(doc)
    assert event["graph"]["nodes"][0]["label"] == "OUTPUT"
    assert "MulBackward0" in {n["name"] for n in event["graph"]["nodes"]}
    assert "OUTPUT" in diagnostics(doc, "root_chosen")[0]["message"]


def test_backward_with_gradient_on_non_scalar(trace_source):
    doc = trace_source("""
        import torch
        w = torch.ones(3, requires_grad=True)
        y = w * torch.tensor([1.0, 2.0, 3.0])
        y.backward(torch.tensor([1.0, 10.0, 100.0]))
    """)
    (event,) = backward_events(doc)
    assert event["call"] == "Tensor.backward" and event["line"] == 5
    assert values(event["grads"]["w"]["after"]).tolist() == [1.0, 20.0, 300.0]


def test_autograd_grad_is_an_event_and_leaves_grad_alone(trace_source):
    doc = trace_source("""
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
    """)
    first, second = backward_events(doc)
    assert first["call"] == second["call"] == "torch.autograd.grad"
    assert values(first["results"][0]).tolist() == [3.0, 12.0]   # 3x^2
    assert values(second["results"][0]).tolist() == [6.0, 12.0]  # 6x
    assert first["grads"]["x"]["after"] is None  # autograd.grad does not touch .grad
    # the second graph is the first one's backward: it has more nodes than x**3 alone
    assert len(second["graph"]["nodes"]) > len(first["graph"]["nodes"])


def test_every_module_call_names_its_ops(trace_source):
    doc = trace_source("""
        import torch
        from torch import nn
        net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
        net(torch.randn(4, 2)).sum().backward()
    """)
    (event,) = backward_events(doc)
    modules = {n["name"]: n["module"] for n in event["graph"]["nodes"] if n["kind"] == "op"}
    assert modules["ReluBackward0"] == "1"
    assert modules["SumBackward0"] is None  # made at top level, outside any module
    addmm = [n["module"] for n in event["graph"]["nodes"] if n["name"] == "AddmmBackward0"]
    assert sorted(addmm) == ["0", "2"]
    assert set(doc["params"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_nonfinite_gradients_are_flagged(trace_source):
    doc = trace_source("""
        import torch
        w = torch.tensor([0.0, 1.0], requires_grad=True)
        torch.sqrt(w).sum().backward()   # d sqrt(w)/dw at 0 is infinite
    """)
    (diag,) = diagnostics(doc, "nonfinite_gradient")
    assert diag["params"] == ["w"]
    (event,) = backward_events(doc)
    assert event["grads"]["w"]["after"]["values"][0] == "Infinity"


def test_backward_on_tensor_without_grad_fn(trace_source):
    doc = trace_source("""
        import torch
        w = torch.randn(3, requires_grad=True)
        with torch.no_grad():
            y = (w * 2).sum()
        y.backward()
    """)
    assert doc["error"]["type"] == "RuntimeError" and doc["error"]["line"] == 6
    (diag,) = diagnostics(doc, "output_without_grad_fn")
    assert "line 6" in diag["message"]
    (event,) = backward_events(doc)
    assert event["error"] is not None


def test_backward_passes_past_the_cap_are_counted_not_recorded(trace_source):
    from app.trace.recorder import RecordingLimits

    doc = trace_source("""
        import torch
        w = torch.ones(2, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(7):
            opt.zero_grad()
            (w * w).sum().backward()
            opt.step()
        print(torch.is_anomaly_enabled())
    """, limits=RecordingLimits(max_backward_events=3, max_step_events=2))
    assert len(backward_events(doc)) == 3
    assert len([e for e in doc["events"] if e["kind"] == "step"]) == 2
    assert doc["events_skipped"] == {"backward": 4, "step": 5}
    assert diagnostics(doc, "events_skipped")
    # once nothing more is recorded, the expensive stack capture is off
    assert doc["stdout"] == "False\n"
    # the recorded steps really are the first ones: w shrinks by lr * 2w each step
    first_step = next(e for e in doc["events"] if e["kind"] == "step")
    assert torch.allclose(values(first_step["params"]["w"]["after"]), torch.full((2,), 0.8,
                          dtype=torch.float64))


def test_chosen_root_whose_backward_fails_is_a_clear_error(trace_source):
    doc = trace_source("""
        import torch
        x = torch.randn(3, requires_grad=True)
        a = x.sigmoid()
        a.add_(1)          # sigmoid saved its output: backward through it now fails
        b = a * 2
    """)
    err = doc["error"]
    assert err["type"] == "RuntimeError"
    assert "took the last module-level tensor with a grad_fn (`b`)" in err["message"]
    assert "modified by an inplace operation" in err["message"]
    (event,) = backward_events(doc)
    assert event["synthetic"] and event["error"]["type"] == "RuntimeError"


LINES = """
import torch
from torch import nn
import torch.nn.functional as F

class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3

torch.manual_seed(0)
layer = nn.Linear(4, 4)
attn = nn.MultiheadAttention(4, 2)
x = torch.randn(3, 2, 4, requires_grad=True)
h = layer(x)
a, _ = attn(h, h, h)
s = Scale.apply(a)
s[0] = 0
y = F.linear(s, layer.weight).tanh()
loss = y.sum()
loss.backward()
"""


def test_node_lines_without_anomaly_mode_are_the_lines_anomaly_mode_gives(trace_source,
                                                                           monkeypatch):
    """Big models trace with anomaly mode off (its stack capture is the main cost): each node's
    line then comes from the recorder's own tags, and must be the line anomaly mode records."""
    from app.trace import _internals as internals
    from app.trace import recorder

    original = internals.creation_line

    def from_anomaly_mode(fn, path):  # the line as anomaly mode's stack says, tags aside
        meta = internals.node_metadata(fn)
        tag = meta.pop(internals.LINE_TAG, None)
        try:
            return original(fn, path)
        finally:
            if tag is not None:
                meta[internals.LINE_TAG] = tag

    with monkeypatch.context() as patch:
        patch.setattr(internals, "creation_line", from_anomaly_mode)
        with_anomaly = backward_events(trace_source(LINES))[0]["graph"]["nodes"]
    monkeypatch.setattr(recorder, "ANOMALY_NODES", 0)
    tags_only = trace_source(LINES)
    assert "Error detected" not in tags_only["stderr"]
    without = backward_events(tags_only)[0]["graph"]["nodes"]
    lines = [(n["id"], n["name"], n["line"], n.get("module")) for n in with_anomaly]
    assert [(n["id"], n["name"], n["line"], n.get("module")) for n in without] == lines
    assert {line for _, _, line, _ in lines} >= {19, 20, 21, 22, 23, 24}


NONLEAF_INPUT = """
import torch
torch.manual_seed(0)
leaf = torch.randn(4, requires_grad=True)
x = leaf * 3
a, b = x.chunk(2)
y = (a * a).sum() + (a * b).sum() + b.sum()
ga, gx = torch.autograd.grad(y, (a, x))
"""


def test_autograd_grad_of_a_computed_tensor_counts_its_uses_and_blames_no_leaf(trace_source):
    # found on PyTorch's double-backward tutorial: grad w.r.t. `x = leaf.clone()` named x a
    # made-up leaf "leaf1", recorded no use of it, and warned it "received no gradient"
    doc = trace_source(NONLEAF_INPUT)
    assert doc["error"] is None
    (event,) = backward_events(doc)
    assert event["inputs"] == ["a", "x"]
    torch.manual_seed(0)  # what torch returns, computed here plainly
    leaf = torch.randn(4, requires_grad=True)
    x = leaf * 3
    a, b = x.chunk(2)
    y = (a * a).sum() + (a * b).sum() + b.sum()
    expected = torch.autograd.grad(y, (a, x))
    for name, returned, want in zip(event["inputs"], event["results"], expected, strict=True):
        assert torch.allclose(values(returned), want.double())
        uses = event["contributions"][name]
        # each use's gradient, summed, is what autograd.grad returned for it
        assert torch.allclose(sum(values(u["grad"]) for u in uses), want.double())
    assert len(event["contributions"]["a"]) == 3  # a * a (twice) and a * b; not b's uses
    assert len(event["contributions"]["x"]) == 1  # chunk takes it once
    assert set(doc["params"]) == {"leaf"}  # no made-up leaf for a computed tensor
    assert not diagnostics(doc, "no_gradient")


def test_a_computed_input_keeps_its_own_name_with_create_graph_and_beside_a_leaf(trace_source):
    # from a review: create_graph=True named the computed input as a made-up leaf again, and a
    # variable rebound from a leaf (x = x * 3) gave the computed tensor the leaf's name
    doc = trace_source("""
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        first = (x * x).sum()
        first.backward()
        x = x * 3
        y = (x ** 3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
    """)
    assert doc["error"] is None
    first, second = backward_events(doc)
    assert second["inputs"] == ["x (computed)"]
    assert torch.allclose(sum(values(u["grad"]) for u in second["contributions"]["x (computed)"]),
                          values(second["results"][0]))  # 3 (3x)^2 = [27, 108]
    assert values(second["results"][0]).tolist() == [27.0, 108.0]
    assert set(doc["params"]) == {"x"}  # the leaf; no made-up one
    assert not diagnostics(doc, "no_gradient")
    assert len(first["contributions"]["x"]) == 2  # the leaf's own pass is untouched


def test_a_nan_learning_rate_is_said_as_unknown_not_written_as_nan(trace_source):
    # JSON has no NaN: json's encoder refused the whole report, orjson wrote null silently
    doc = trace_source("""
        import torch
        w = torch.ones(2, requires_grad=True)
        opt = torch.optim.SGD([w], lr=float("nan"))
        (w * w).sum().backward()
        opt.step()
    """)
    (step,) = [e for e in doc["events"] if e["kind"] == "step"]
    assert step["lr"] == [None]
    validate(json.loads(dumps(doc, fast=False)))  # json's strict encoder takes it too


def test_the_seed_gradient_of_a_backward_is_recorded(trace_source):
    """backward(gradient=...) starts the pass from that gradient: the Trace keeps it (it was
    "not recorded"), and .grad is what PyTorch makes of it."""
    code = """
        import torch
        w = torch.ones(3, requires_grad=True)
        y = w * 2
        y.backward(gradient=torch.tensor([1.0, 0.0, 10.0]))
        (g,) = torch.autograd.grad((w * 3).sum(), [w], grad_outputs=torch.tensor(0.5))
        (w * 1).sum().backward()
    """
    w = torch.ones(3, requires_grad=True)
    (w * 2).backward(gradient=torch.tensor([1.0, 0.0, 10.0]))
    assert w.grad.tolist() == [2.0, 0.0, 20.0]  # PyTorch's
    doc = trace_source(code)
    validate(json.loads(dumps(doc, fast=False)))
    first, second, third = [e for e in doc["events"] if e["kind"] == "backward"]
    assert first["seed"][0]["values"] == [1.0, 0.0, 10.0]
    assert first["grads"]["w"]["after"]["values"] == [2.0, 0.0, 20.0]
    assert second["seed"][0]["values"] == 0.5
    assert "seed" not in third  # autograd's implicit 1


def test_one_backward_from_two_roots_is_one_pass_leaving_what_two_backwards_would(trace_source):
    """What the page says of a pass with several roots (status.js rootsNote): one event, and
    `.grad` as one backward() per root would leave it, by PyTorch's own two runs."""
    import torch

    def grads(together: bool) -> torch.Tensor:
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        shared = torch.tanh(w)
        l1, l2 = (shared * 2).sum(), (shared * shared).sum()
        if together:
            torch.autograd.backward([l1, l2])
        else:
            l1.backward(retain_graph=True)  # they share tanh's saved output
            l2.backward()
        return w.grad

    assert torch.allclose(grads(True), grads(False))
    doc = trace_source("""
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        shared = torch.tanh(w)
        torch.autograd.backward([(shared * 2).sum(), (shared * shared).sum()])
        """)
    [event] = [e for e in doc["events"] if e["kind"] == "backward"]
    assert event["call"] != "torch.autograd.grad"
    assert [n["kind"] for n in event["graph"]["nodes"]].count("output") == 2
    assert abs(sum_of(event["grads"]["w"]["after"]) - float(grads(True).sum())) < 1e-5


def sum_of(summary: dict) -> float:
    return float(sum(summary["values"]))
