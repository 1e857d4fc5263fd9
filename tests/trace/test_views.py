"""Graphs the script asked to see: its `torchviz.make_dot` calls and the graph a
`create_graph=True` gradient carries (app/trace/views.py).

The make_dot call inside the traced script still returns torchviz's own Digraph: the script
prints its DOT body, and the view must have the same grad_fn nodes and edges torchviz drew.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import pytest
import torch
from torch import nn

from tests.trace_facts import backward_events, diagnostics

pytest.importorskip("torchviz")

TORCHVIZ_BODY = """
import json
def dump(g):
    print("BODY" + json.dumps(list(g.body)))
"""


def torchviz_names(stdout: str) -> list[Counter]:
    """grad_fn names (Counter) of each make_dot body the script printed."""
    out = []
    for line in stdout.splitlines():
        if not line.startswith("BODY"):
            continue
        labels = {}
        for entry in json.loads(line[4:]):
            node = re.match(r"\s*(\d+) \[label=(.*?)(?: fillcolor=.*)?\]$", entry)
            if node:
                labels[node.group(1)] = node.group(2).strip('"')
        out.append(Counter(v for v in labels.values() if "\n" not in v and "(" not in v))
    return out


def view_names(view: dict) -> Counter:
    return Counter(n["name"] for n in view["graph"]["nodes"] if n["kind"] != "output")


def test_make_dot_is_a_view_with_torchvizs_nodes_and_the_scripts_names(trace_source, tmp_path,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)  # render() writes its DOT source here
    doc = trace_source(TORCHVIZ_BODY + """
import torch
from torch import nn
from torchviz import make_dot
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
y = model(torch.randn(3, 4)).mean()
dot = make_dot(y, params=dict(model.named_parameters()))
dump(dot)
dot.render("model_graph", format="png")
y.backward()
""")
    assert doc["error"] is None, doc["error"]
    [view] = doc["views"]
    assert view["kind"] == "make_dot" and view["line"] == 12 and view["event"] is None
    [expected] = torchviz_names(doc["stdout"])
    assert view_names(view) == expected and sum(expected.values()) >= 6
    # the leaves carry the names the script passed in params=, as torchviz labels them
    params = {n["param"] for n in view["graph"]["nodes"] if n["kind"] == "param"}
    assert params == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert view["names"] == sorted(params)
    # make_dot before backward: the pass that follows walks the same graph
    assert view["matches"] == {"event": backward_events(doc)[0]["index"],
                               "shared": sum(expected.values()),
                               "nodes": sum(expected.values())}
    # render() ran no program (the worker may not): the page has the picture, and says so
    assert diagnostics(doc, "make_dot_render")[0]["message"].count("line 14") == 1


def test_render_writes_the_dot_source_and_no_picture(trace_source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = trace_source("""
import torch
from torchviz import make_dot
x = torch.randn(3, requires_grad=True)
path = make_dot((x * 2).sum()).render("g", format="png")
print(path)
""")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "g.png"
    assert (tmp_path / "g").is_file() and not (tmp_path / "g.png").exists()
    assert "digraph" in (tmp_path / "g").read_text()
    # a script that only draws never calls backward: the pass is run from what it drew
    [event] = backward_events(doc)
    assert event["synthetic"] and "make_dot at line 5" in event["synthetic_reason"]
    assert view_names(doc["views"][0]) == Counter(
        n["name"] for n in event["graph"]["nodes"] if n["kind"] != "output")


SINH_SCRIPTS = {
    # PyTorch's double-backward tutorial, "what not to do": intermediates kept on ctx
    "cut": """
class Sinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.expx = expx
        ctx.expnegx = expnegx
        return (expx - expnegx) / 2

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out * (ctx.expx + ctx.expnegx) / 2

def sinh(x):
    return Sinh.apply(x)
""",
    # the tutorial's fix: the intermediates are extra outputs, saved, so backward has a graph
    "kept": """
class Sinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.save_for_backward(expx, expnegx)
        return (expx - expnegx) / 2, expx, expnegx

    @staticmethod
    def backward(ctx, grad_out, grad_out_exp, grad_out_negexp):
        expx, expnegx = ctx.saved_tensors
        grad_input = grad_out * (expx + expnegx) / 2
        grad_input += grad_out_exp * expx
        grad_input -= grad_out_negexp * expnegx
        return grad_input

def sinh(x):
    return Sinh.apply(x)[0]
""",
}

DOUBLE_BACKWARD = TORCHVIZ_BODY + """
import torch
import torchviz
{function}
x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
out = sinh(x)
grad_x, = torch.autograd.grad(out.sum(), x, create_graph=True)
dump(torchviz.make_dot((grad_x, x, out), params={{"grad_x": grad_x, "x": x, "out": out}}))
print("HAS_GRAPH", grad_x.grad_fn is not None)
"""


def test_a_gradients_graph_is_recorded_and_matches_torchviz(trace_source):
    doc = trace_source(DOUBLE_BACKWARD.format(function=SINH_SCRIPTS["kept"]))
    assert doc["error"] is None, doc["error"]
    assert "HAS_GRAPH True" in doc["stdout"]  # torch's word: this gradient has a graph
    [event] = backward_events(doc)
    assert event["create_graph"] is True and "no_graph" not in event
    gradient = doc["views"][event["gradient_view"]]
    assert gradient["kind"] == "gradient" and gradient["event"] == event["index"]
    # the gradient's graph reaches x (it is a function of x) and comes from Sinh's backward
    leaves = [n for n in gradient["graph"]["nodes"] if n["kind"] in ("leaf", "param")]
    assert [n["param"] for n in leaves] == ["x"]
    assert any(n["kind"] == "custom" for n in gradient["graph"]["nodes"])
    # the make_dot of (grad_x, x, out) has every node torchviz drew for it
    make_dot = next(v for v in doc["views"] if v["kind"] == "make_dot")
    [expected] = torchviz_names(doc["stdout"])
    assert view_names(make_dot) == expected
    assert not diagnostics(doc, "gradient_graph_cut")


def test_a_custom_backward_that_cuts_the_gradients_graph_is_named(trace_source):
    doc = trace_source(DOUBLE_BACKWARD.format(function=SINH_SCRIPTS["cut"]))
    assert doc["error"] is None, doc["error"]
    assert "HAS_GRAPH False" in doc["stdout"]  # torch's word: no graph
    [event] = backward_events(doc)
    assert event["no_graph"] == ["d/d x"] and "gradient_view" not in event
    [finding] = diagnostics(doc, "gradient_graph_cut")
    assert "`Sinh`" in finding["message"] and "gradgradcheck agrees" in finding["message"]
    sinh_nodes = [n["id"] for n in event["graph"]["nodes"] if n.get("function") == "Sinh"]
    assert finding["nodes"] == sinh_nodes and finding["event"] == event["index"]
    # PyTorch agrees that this Function's second derivative is wrong
    ns: dict = {"torch": torch}
    exec(SINH_SCRIPTS["cut"], ns)
    x = torch.rand(2, dtype=torch.double, requires_grad=True)
    assert not torch.autograd.gradgradcheck(ns["Sinh"].apply, (x,), raise_exception=False)


def test_a_constant_gradient_has_no_graph_and_is_not_blamed_on_anyone(trace_source):
    doc = trace_source("""
import torch

class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2

x = torch.randn(3, requires_grad=True, dtype=torch.double)
Double.apply(x).sum().backward(create_graph=True)
print(x.grad.grad_fn)
""")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "None"
    [event] = backward_events(doc)
    assert event["no_graph"] == ["x.grad"]
    # Double's backward returned a gradient with no graph, and gradgradcheck says that is right
    assert event["cut_by"]
    assert not diagnostics(doc, "gradient_graph_cut")
    [note] = diagnostics(doc, "gradient_constant")
    assert "`x.grad`" in note["message"] and "line 14" in note["message"]


def test_make_dot_from_trace_is_noted_not_drawn(trace_source):
    doc = trace_source("""
import torch
import torchviz
x = torch.randn(2, requires_grad=True)
try:
    torchviz.make_dot_from_trace(None)
except Exception:
    pass
(x * 2).sum().backward()
""")
    [note] = diagnostics(doc, "not_drawn")
    assert "make_dot_from_trace" in note["message"] and "line 6" in note["message"]
    assert "views" not in doc


def test_views_of_a_big_graph_in_a_loop_stay_within_their_budget(trace_source, monkeypatch):
    """make_dot on every iteration of a big graph: the first views are kept (the last one cut
    short, and said so), the rest are counted and said, so the report stays within its cap.
    The budget is made small here to keep the test quick; the rule is the same. (The graph is
    wide, not deep: torchviz itself recurses, and fails on a deep one.)"""
    from app.trace import views

    monkeypatch.setattr(views, "VIEW_NODE_BUDGET", 5000)
    doc = trace_source("""
import torch
from torchviz import make_dot
x = torch.randn(2, requires_grad=True)
for step in range(8):
    y = torch.stack([x * i for i in range(1500)])
    make_dot(y.sum())
y.sum().backward()
""")
    assert doc["error"] is None, doc["error"]
    kept = doc["views"]
    assert [len(v["graph"]["nodes"]) for v in kept[:3]] == [1500 + 4] * 3
    assert [v["graph"]["truncated"] for v in kept] == [False, False, False, True]
    ops = sum(len([n for n in v["graph"]["nodes"] if n["kind"] != "output"]) for v in kept)
    assert ops == 5000
    [said] = diagnostics(doc, "views_dropped")
    assert said["message"].startswith("4 more graph(s)")


def test_gradients_with_respect_to_a_generator_of_parameters_have_their_graph(trace_source):
    """torch.autograd.grad(loss, model.parameters(), create_graph=True), as a gradient penalty
    or MAML writes it: the generator is used by torch and still names the gradients."""
    doc = trace_source("""
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
loss = model(torch.randn(5, 3)).pow(2).mean()
grads = torch.autograd.grad(loss, model.parameters(), create_graph=True)
penalty = sum(g.pow(2).sum() for g in grads)
penalty.backward()
print(len(grads), all(g.grad_fn is not None for g in grads))
""")
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == "4 True"
    first, second = backward_events(doc)
    gradient = doc["views"][first["gradient_view"]]
    assert gradient["label"].startswith("the graph of d/d 0.weight, d/d 0.bias")
    assert "no_graph" not in first
    # the penalty's backward walks the gradients' graph: it reaches the parameters PyTorch
    # says the penalty depends on
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    loss = model(torch.randn(5, 3)).pow(2).mean()
    grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    reached = torch.autograd.grad(penalty, list(model.parameters()), allow_unused=True)
    names = [name for name, _ in model.named_parameters()]
    assert set(second["uses"]) == {n for n, g in zip(names, reached, strict=True)
                                   if g is not None}


def test_torchviz_imported_by_the_script_and_not_watched_is_said_and_still_draws(
        trace_source, tmp_path, monkeypatch):
    """Patching torchviz when the script imports it can fail (here made to): the script's own
    make_dot still runs as plain torchviz's, and the Trace says that part went unrecorded."""
    from app.trace import intercept

    def broken(*_args):
        raise RuntimeError("a torchviz we do not know")

    monkeypatch.setattr(intercept, "_torchviz_calls", broken)
    for name in [m for m in sys.modules if m == "torchviz" or m.startswith("torchviz.")]:
        monkeypatch.delitem(sys.modules, name)  # imported by the script, not before the run
    monkeypatch.chdir(tmp_path)
    script = TORCHVIZ_BODY + """
import torch
from torchviz import make_dot
x = torch.ones(3, requires_grad=True)
y = (x * 2).tanh().sum()
dump(make_dot(y))
y.backward()
"""
    doc = trace_source(script)
    assert doc["error"] is None, doc["error"]
    assert not doc.get("views")  # not watched
    [drawn] = torchviz_names(doc["stdout"])
    plain = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           cwd=tmp_path, check=True)
    assert [drawn] == torchviz_names(plain.stdout) and drawn["TanhBackward0"] == 1
    said = [d["message"] for d in diagnostics(doc, "tracer_error")]
    assert len(said) == 1 and "torchviz" in said[0] and "a torchviz we do not know" in said[0]
