"""torch.compile under the tracer, checked against what PyTorch itself does with the same code.

A compiled region is one node of the backward graph as autograd sees it (AOTAutograd's), the
gradients are those plain PyTorch leaves in `.grad`, and the tracer neither adds nor removes a
graph break. In a traced run a call left to Inductor compiles with aot_eager, and says so.
Dynamo is slow to start: few tests, each on a small model, dynamo reset between them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections import Counter

import jsonschema
import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from app.format import load_schema
from tests.trace_facts import backward_events, contribution_sum, diagnostics, values

# the models, shared by the traced script and the test's own plain runs
MODELS = """
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.skip = nn.Linear(4, 1)

    def forward(self, x):
        return self.net(x) + self.skip(x) * self.skip(x).sigmoid()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.ff = nn.Linear(8, 8)

    def forward(self, x):
        h = self.norm(x)
        a, _ = self.attn(h, h, h)
        x = x + a
        return (x + self.ff(x).relu()).sum(-1)


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 6)
        self.second = nn.Linear(6, 1)

    def forward(self, x):
        h = self.first(x).tanh()
        torch._dynamo.graph_break()
        return self.second(h)


INPUTS = {"MLP": (5, 4), "Block": (2, 3, 8), "Broken": (5, 4)}
"""

SCRIPT = MODELS + """
import sys

torch.manual_seed(0)
model = {"MLP": MLP, "Block": Block, "Broken": Broken}[sys.argv[1]]()
x = torch.randn(INPUTS[sys.argv[1]])
run = torch.compile(model) if sys.argv[2] == "compiled" else model
loss = run(x).pow(2).mean()
loss.backward()
"""


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    counters.clear()


def plain_run(kind: str, backend: str | None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The script's computation without autograd-lab: the `.grad` PyTorch leaves, and the loss
    (compiled with `backend`, or eager when None)."""
    namespace: dict = {}
    exec(compile(MODELS, "<models>", "exec"), namespace)  # noqa: S102 - our own source
    torch.manual_seed(0)
    model = namespace[kind]()
    x = torch.randn(namespace["INPUTS"][kind])
    run = torch.compile(model, backend=backend) if backend else model
    loss = run(x).pow(2).mean()
    loss.backward()
    return {n: p.grad.detach().double() for n, p in model.named_parameters()}, loss


def walked_names(loss: torch.Tensor) -> Counter:
    """The backward graph's nodes by class name, as PyTorch's own grad_fn graph has them."""
    seen, stack = {loss.grad_fn}, [loss.grad_fn]
    while stack:
        fn = stack.pop()
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return Counter(type(fn).__name__ for fn in seen)


def traced_names(event: dict) -> Counter:
    return Counter(n["name"] for n in event["graph"]["nodes"] if n["kind"] != "output")


@pytest.mark.parametrize("kind", ["MLP", "Block"])
def test_compiled_model_gives_pytorchs_gradients_and_graph(trace_source, kind):
    eager_grads, _ = plain_run(kind, None)
    torch._dynamo.reset()
    compiled_grads, compiled_loss = plain_run(kind, "aot_eager")
    compiled_graph = walked_names(compiled_loss)
    region = {n for n in compiled_graph if "Compiled" in n}
    assert region == {"CompiledFunctionBackward"}, compiled_graph  # PyTorch's name for it
    torch._dynamo.reset()
    for how in ("eager", "compiled"):
        doc = trace_source(SCRIPT, argv=[kind, how])
        assert doc["error"] is None, doc["error"]
        jsonschema.validate(doc, load_schema())
        (event,) = backward_events(doc)
        assert set(doc["params"]) == set(eager_grads)
        for name, expected in eager_grads.items():
            got = values(doc["params"][name]["grad"])
            assert torch.allclose(got, expected, atol=1e-5), (how, name)
            assert torch.allclose(got, compiled_grads[name], atol=1e-5), (how, name)
            # the tracer's per-use contributions still add up to what .grad got
            assert torch.allclose(contribution_sum(event, name),
                                  values(event["grads"][name]["after"]), atol=1e-6), (how, name)
            assert event["uses"][name] >= 1
        names = traced_names(event)
        # dynamo's wrapper is no module of the script's: nothing is placed under `_orig_mod`
        modules = {n.get("module") for n in event["graph"]["nodes"]}
        assert not any(m and "_orig_mod" in m for m in modules), (how, modules)
        if how == "compiled":
            assert names == compiled_graph  # one node for the compiled region, as autograd has
        else:
            assert not region & set(names)
    # the compiled run's one diagnostic names the line of its torch.compile call
    (said,) = diagnostics(doc, "compiled_with_aot_eager")
    assert said["level"] == "info"
    assert f"line {_line_of(SCRIPT, 'torch.compile(model)')} " in said["message"]


def test_graph_break_makes_two_compiled_regions(trace_source):
    _, loss = plain_run("Broken", "aot_eager")
    plain_regions = walked_names(loss)["CompiledFunctionBackward"]
    assert plain_regions == 2  # dynamo compiled each side of the break on its own
    breaks_plain = sum(counters["graph_break"].values())
    graphs_plain = counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    counters.clear()
    doc = trace_source(SCRIPT, argv=["Broken", "compiled"])
    assert doc["error"] is None, doc["error"]
    (event,) = backward_events(doc)
    assert traced_names(event)["CompiledFunctionBackward"] == plain_regions
    # the tracer adds no graph break and no graph of its own
    assert breaks_plain >= 1
    assert sum(counters["graph_break"].values()) == breaks_plain
    assert counters["stats"]["unique_graphs"] == graphs_plain


# each way a script compiles: a module, a bare decorator, a decorator with an Inductor mode, a
# module's own .compile(), Inductor named (it cannot run in the sandbox either); then backends
# the script names itself
CALLS = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 4)
fast = torch.compile(model)

@torch.compile
def double(x):
    return x * 2

@torch.compile(mode="max-autotune")
def squash(x):
    return x.tanh()

inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
inner.compile()
hot = torch.compile(lambda x: x.exp(), backend="inductor")
mine = torch.compile(lambda x: x.sin(), backend="eager")
theirs = torch.compile(lambda x: x.cos(), backend="aot_eager")
x = torch.randn(3, 4)
for _ in range(2):
    out = squash(double(fast(x))) + inner(x) + hot(x) + mine(x) + theirs(x)
out.pow(2).sum().backward()
print(double(x).shape)
"""

def test_each_default_backend_call_is_said_once_with_its_line(trace_source):
    original = torch.compile
    doc = trace_source(CALLS)
    assert doc["error"] is None, doc["error"]
    assert torch.compile is original  # put back after the run
    said = diagnostics(doc, "compiled_with_aot_eager")
    lines = [int(re.search(r"at line (\d+) ", d["message"]).group(1)) for d in said]
    expected = [_line_of(CALLS, text) for text in
                ("torch.compile(model)", "@torch.compile\n", "@torch.compile(mode",
                 "inner.compile()", "backend=\"inductor\"")]
    assert lines == expected
    assert all(d["level"] == "info" and "aot_eager" in d["message"] and "inductor" in
               d["message"] for d in said)
    assert ["mode" in d["message"] for d in said] == [False, False, True, False, False]
    (event,) = backward_events(doc)
    assert traced_names(event)["CompiledFunctionBackward"] >= 3


def test_tracer_adds_no_graph_and_no_graph_break(trace_source, monkeypatch):
    """The same script, traced and plain (compiled with aot_eager as the tracer does), gives
    dynamo the same graphs to compile and the same breaks. (Inside `inner.compile()` dynamo
    skips torch.nn's frames: the tracer's module hooks and op mode run there, eagerly, and
    dynamo had taken the mode's frame for a function to compile, F.linear a graph of its own.)"""
    doc = trace_source(CALLS)
    assert doc["error"] is None, doc["error"]
    traced = (dict(counters["graph_break"]), counters["stats"]["unique_graphs"])
    torch._dynamo.reset()
    counters.clear()
    original = torch.compile

    def aot_eager(model=None, **kwargs):
        if kwargs.get("backend") in (None, "inductor"):
            kwargs.pop("mode", None)
            kwargs["backend"] = "aot_eager"
        return original(model, **kwargs)

    monkeypatch.setattr(torch, "compile", aot_eager)
    exec(compile(textwrap.dedent(CALLS), "<calls>", "exec"), {"__name__": "__main__"})  # noqa: S102
    plain = (dict(counters["graph_break"]), counters["stats"]["unique_graphs"])
    assert plain[1] >= 5
    assert traced == plain


def test_compiled_script_runs_in_the_sandbox(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    out = tmp_path / "trace.json"
    done = subprocess.run([sys.executable, "-m", "app.cli", "trace", str(script), "-o", str(out),
                           "--", "MLP", "compiled"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["error"] is None, doc["error"]
    (event,) = backward_events(doc)
    assert "CompiledFunctionBackward" in traced_names(event)
    assert len(diagnostics(doc, "compiled_with_aot_eager")) == 1


def _line_of(source: str, text: str) -> int:
    source = textwrap.dedent(source)
    return source[:source.index(text)].count("\n") + 1
