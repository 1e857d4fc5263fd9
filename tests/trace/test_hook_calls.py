"""Every call of the script's hooks per pass (issue 34): observing hooks too, under `backward`
and `torch.autograd.grad`, and the legacy module hook on the node it really sits on.

The oracle is PyTorch run plainly: each script counts its own hook calls per pass and prints
them (and what it learns about the graph) as JSON; the test runs it in a plain Python process
and under the tracer, and holds the Trace to the plain run's counts. The traced run's output
must be the plain run's too: counting a hook never changes what it does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.trace_facts import backward_events, diagnostics, node

# a counter per pass and hook; PASS is set before each backward
COUNTING = """
import json
import torch
from torch import nn
counts = {}
PASS = 0
def tally(key):
    counts.setdefault(str(PASS), {}).setdefault(key, 0)
    counts[str(PASS)][key] += 1
"""

TENSORS = COUNTING + """
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
h = w * 2
def observe(g):
    tally("observe")          # returns None: it only looks
h.register_hook(observe)
def on_w(g):
    tally("on_w")
w.register_hook(on_w)         # w is used twice below (w * 2 and h * w)
def doubled(g):
    tally("doubled")
    return g * 2              # a new gradient
v = torch.randn(3, requires_grad=True)
v.register_hook(doubled)
def after(p):
    tally("after")
w.register_post_accumulate_grad_hook(after)
loss = (h * w).sum() + (v * v).sum()
loss.backward(retain_graph=True)
PASS = 1
loss.backward(retain_graph=True)
PASS = 2
gw, gv = torch.autograd.grad(loss, [w, v])
print(json.dumps({"counts": counts, "w_grad": w.grad.tolist(), "v_grad": v.grad.tolist(),
                  "gv": gv.tolist()}))
"""

MODULES = COUNTING + """
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.out = nn.Linear(4, 2)
    def forward(self, x):
        return torch.tanh(self.out(torch.relu(self.fc(x)))) * 2
model = Block()
shapes = []
def legacy(module, grad_input, grad_output):
    tally("legacy")
    shapes.append([None if g is None else list(g.shape) for g in grad_input])
model.register_backward_hook(legacy)
def full(module, grad_input, grad_output):
    tally("full")
model.fc.register_full_backward_hook(full)
def full_pre(module, grad_output):
    tally("full_pre")
model.out.register_full_backward_pre_hook(full_pre)
x = torch.randn(5, 3, requires_grad=True)
out = model(x)
out.sum().backward()
print(json.dumps({"counts": counts, "last_node": type(out.grad_fn).__name__, "shapes": shapes}))
"""

RAISES = """
import torch
w = torch.ones(2, requires_grad=True)
def refuse(g):
    raise ValueError("no gradient for you")
w.register_hook(refuse)
try:
    (w * 3).sum().backward()
except ValueError as exc:
    print("raised:", exc)
print(w.grad)
"""


def _line(source: str, text: str) -> int:
    """The line of `source` that holds `text`: where the script registered a hook."""
    (line,) = [i for i, row in enumerate(source.splitlines(), 1) if text in row]
    return line


def _run(tmp_path, source: str) -> tuple[dict, str]:
    """The Trace of `source`, and its output run plainly."""
    from app.trace.tracer import trace_script

    path = tmp_path / "script.py"
    path.write_text(source)
    plain = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                           timeout=120, check=True)
    return trace_script(path), plain.stdout


def _calls(event: dict, line: int) -> dict | None:
    found = [c for c in event.get("hook_calls", ()) if c["line"] == line]
    assert len(found) <= 1, found
    return found[0] if found else None


@pytest.fixture(scope="module")
def tensors(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("tensors"), TENSORS)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("modules"), MODULES)


def test_the_hooks_run_as_they_do_plainly(tensors, modules):
    for doc, plain in (tensors, modules):
        assert doc["error"] is None, doc["error"]
        assert json.loads(doc["stdout"]) == json.loads(plain)


@pytest.mark.parametrize(("key", "registered"), [
    ("observe", "h.register_hook(observe)"), ("on_w", "w.register_hook(on_w)"),
    ("doubled", "v.register_hook(doubled)"), ("after", "register_post_accumulate_grad_hook")])
def test_each_pass_counts_each_hooks_calls_as_pytorch_made_them(tensors, key, registered):
    doc, plain = tensors
    counts = json.loads(plain)["counts"]
    line = _line(TENSORS, registered)
    events = backward_events(doc)
    assert [e["call"] for e in events] == ["Tensor.backward", "Tensor.backward",
                                           "torch.autograd.grad"]
    for index, event in enumerate(events):
        expected = counts.get(str(index), {}).get(key, 0)
        record = _calls(event, line)
        assert (record["calls"] if record else 0) == expected, (index, key, record)


def test_a_tensor_used_twice_fires_its_hook_once_and_autograd_grad_skips_post_hooks(tensors):
    """The facts the counts above stand on, from the plain run: a leaf's hook sees the summed
    gradient (once a pass, though it is used twice), and autograd.grad runs tensor hooks but
    accumulates nothing, so no post-accumulate-grad hook runs."""
    counts = json.loads(tensors[1])["counts"]
    assert counts["0"]["on_w"] == 1 and counts["2"]["on_w"] == 1
    assert "after" in counts["0"] and "after" not in counts["2"]


def test_a_hook_that_returns_a_gradient_is_told_from_one_that_observes(tensors):
    doc, _plain = tensors
    for event in backward_events(doc):
        doubled = _calls(event, _line(TENSORS, "v.register_hook(doubled)"))
        observed = _calls(event, _line(TENSORS, "h.register_hook(observe)"))
        assert doubled["returned"] == doubled["calls"] == 1
        assert observed["returned"] == 0 and observed["calls"] == 1


def test_a_hook_is_on_the_node_of_the_tensor_it_was_registered_on(tensors):
    doc, _plain = tensors
    event = backward_events(doc)[0]
    on_h = _calls(event, _line(TENSORS, "h.register_hook(observe)"))
    on_w = _calls(event, _line(TENSORS, "w.register_hook(on_w)"))
    assert on_h["on"] == "h" and on_w["on"] == "w"
    # h = w * 2: its hook runs as the engine runs h's own node
    assert [node(event, n)["name"] for n in on_h["nodes"]] == ["MulBackward0"]
    assert node(event, on_w["nodes"][0]).get("param") == "w"


def test_module_hooks_are_counted_and_the_legacy_one_sits_on_the_last_operation(modules):
    doc, plain = modules
    facts = json.loads(plain)
    (event,) = backward_events(doc)
    counts = facts["counts"]["0"]
    legacy = _calls(event, _line(MODULES, "model.register_backward_hook(legacy)"))
    full = _calls(event, _line(MODULES, "model.fc.register_full_backward_hook(full)"))
    pre = _calls(event, _line(MODULES, "model.out.register_full_backward_pre_hook"))
    assert (legacy["calls"], full["calls"], pre["calls"]) == (
        counts["legacy"], counts["full"], counts["full_pre"])
    assert legacy["kind"] == "module backward hook (legacy)"
    assert full["kind"] == "module full backward hook" and full["on"] == "fc"
    assert pre["kind"] == "module full backward pre-hook" and pre["on"] == "out"
    # the node PyTorch put it on: the one that made the module's output, not the module
    assert legacy["sits_on"] == facts["last_node"] == "MulBackward0"
    assert node(event, legacy["nodes"][0])["name"] == facts["last_node"]
    # its grad_input are that node's (tanh(...) * 2: the tanh's and the constant's), not
    # the gradient of the module's input x, shaped (5, 3)
    assert [5, 3] not in facts["shapes"][0]
    (finding,) = diagnostics(doc, "legacy_module_hook")
    assert facts["last_node"] in finding["message"]
    assert "register_full_backward_hook" in finding["message"]
    assert finding["nodes"] == legacy["nodes"][:1] and finding["event"] == event["index"]


def test_a_hook_that_raises_raises_the_same_and_is_counted(tmp_path):
    doc, plain = _run(tmp_path, RAISES)
    assert doc["stdout"] == plain and "raised: no gradient for you" in plain
    (event,) = backward_events(doc)
    record = _calls(event, _line(RAISES, "w.register_hook(refuse)"))
    assert record["calls"] == 1 and record["returned"] == 0


def test_a_script_with_no_hooks_records_no_hook_calls(tmp_path):
    doc, _plain = _run(tmp_path, "import torch\nw = torch.ones(2, requires_grad=True)\n"
                                 "(w * 2).sum().backward()\n")
    assert all("hook_calls" not in e for e in backward_events(doc))


def test_the_legacy_findings_quote_is_pytorchs_own_warning(modules, tmp_path):
    """The finding quotes torch's deprecation warning: held to what this torch prints."""
    import re

    doc, _plain = modules
    (finding,) = diagnostics(doc, "legacy_module_hook")
    (quoted,) = re.findall(r'"([^"]+)"', finding["message"])
    path = tmp_path / "legacy.py"
    path.write_text(MODULES)
    plain = subprocess.run([sys.executable, "-W", "always", str(path)], capture_output=True,
                           text=True, timeout=120, check=True)
    assert quoted.lower() in plain.stderr.lower()


MULTI = """
import torch
a = torch.ones(2, requires_grad=True)
b = torch.ones(2, requires_grad=True)
seen = []
torch.autograd.graph.register_multi_grad_hook((a, b), lambda grads: seen.append(len(grads)))
a.register_hook(lambda g: None)
(a * b).sum().backward()
print(seen)
"""


def test_hooks_torch_registers_itself_are_not_the_scripts(tmp_path):
    """register_multi_grad_hook puts torch's own hook on each tensor: not the script's
    registration, so not listed as a tensor hook of its line."""
    doc, plain = _run(tmp_path, MULTI)
    assert doc["stdout"] == plain
    (event,) = backward_events(doc)
    assert [c["line"] for c in event["hook_calls"]] == [_line(MULTI, "a.register_hook")]


def test_a_count_that_fails_never_changes_what_the_hook_returned_or_raised():
    """The tracer's bookkeeping around a script's hook (hooks.counting) may fail (here: the
    pass being recorded cannot be read); the hook's own result and its own error, as plain
    Python gives them, come through unchanged."""
    from app.trace.hooks import counting

    def lost():
        raise RuntimeError("the tracer's own failure")

    doubled = counting(lambda g: g * 2, registration=None, recording=lost)
    assert doubled(21) == 42

    def refuses(g):
        raise ValueError("the hook's own error")

    with pytest.raises(ValueError, match="the hook's own error"):
        counting(refuses, registration=None, recording=lost)(1)
