"""`autograd_lab.trace` and `show` in this process, without a kernel."""

from __future__ import annotations

import base64
import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
from torch import nn

import autograd_lab
from autograd_lab.display import TRACE_MIMETYPE
from autograd_lab.magic import parse_line
from tests.trace_facts import backward_events, contribution_sum

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _without_values(d: dict) -> dict:
    return {k: v for k, v in d.items() if not (k == "values" and "numel" in d)}


def _reused_layer():
    torch.manual_seed(0)
    lin, head = nn.Linear(3, 3), nn.Linear(3, 1)
    x = torch.randn(4, 3)
    return lin, head, x


def test_trace_of_a_callable_sums_each_parameter_grad_from_its_uses():
    lin, head, x = _reused_layer()

    def step():
        loss = head(torch.tanh(lin(torch.tanh(lin(x))))).pow(2).mean()
        loss.backward()

    doc = autograd_lab.trace(step)
    assert doc["error"] is None
    (event,) = backward_events(doc)
    params = {f"{m}.{n}": p for m, mod in [("lin", lin), ("head", head)]
              for n, p in mod.named_parameters()}
    assert set(event["contributions"]) == set(params)  # named from the function's variables
    for name, p in params.items():
        assert torch.allclose(contribution_sum(event, name), p.grad.double(), atol=1e-6), name
    assert len(event["contributions"]["lin.weight"]) == 2  # lin is used twice


def test_trace_of_code_runs_in_the_namespace_and_keeps_its_names():
    lin, head, x = _reused_layer()
    ns = {"lin": lin, "head": head, "x": x, "torch": torch}
    doc = autograd_lab.trace("y = head(lin(x)).sum()\ny.backward()\n", ns)
    assert doc["error"] is None
    assert isinstance(ns["y"], torch.Tensor)  # the code's names stay, as a cell's do
    (event,) = backward_events(doc)
    for name, p in [("lin.weight", lin.weight), ("head.bias", head.bias)]:
        assert torch.allclose(contribution_sum(event, name), p.grad.double(), atol=1e-6)


def test_code_that_calls_no_backward_gets_none_added_to_its_gradients():
    lin, head, x = _reused_layer()
    doc = autograd_lab.trace("y = head(lin(x)).sum()\n", {"lin": lin, "head": head, "x": x})
    assert doc["error"] is None and doc["events"] == []
    assert lin.weight.grad is None  # a script's run would have had a backward of ours


def test_show_of_a_trace_dict_draws_it_and_carries_it():
    lin, head, x = _reused_layer()
    ns = {"lin": lin, "head": head, "x": x}
    doc = autograd_lab.trace("loss = head(lin(x)).sum()\nloss.backward()\n", ns)
    bundle = autograd_lab.show(doc)._repr_mimebundle_()
    stored = bundle[TRACE_MIMETYPE]  # the pass drawn, without the tensors' values
    assert stored["events"] == json.loads(json.dumps(doc["events"], default=str).replace(
        "NaN", "null"), object_hook=_without_values)
    assert autograd_lab.show(doc, whole=True)._repr_mimebundle_()[TRACE_MIMETYPE] is doc
    svg = ET.fromstring(bundle["image/svg+xml"])
    assert svg.tag.endswith("svg")
    drawn = {t.text for t in svg.iter() if t.tag.endswith("title")}
    nodes = backward_events(doc)[0]["graph"]["nodes"]
    assert {n["id"] for n in nodes} <= drawn  # node ids are the Trace's (app/render)
    assert "1 backward" in bundle["text/plain"] and "4 parameter(s)" in bundle["text/plain"]
    # the picture in the HTML too, what JupyterLab shows of a saved notebook's output: the
    # same SVG, as an image (an inline <svg> is text soup once an untrusted notebook's HTML is
    # sanitized)
    assert "<svg" not in bundle["text/html"]
    (url,) = re.findall(r'<img class="autograd-lab-picture" src="data:image/svg\+xml;base64,'
                        r'([A-Za-z0-9+/=]+)"', bundle["text/html"])
    assert base64.b64decode(url).decode("utf-8") == bundle["image/svg+xml"]


def test_show_of_a_tensor_names_parameters_from_the_callers_modules():
    lin, head, x = _reused_layer()
    loss = head(torch.tanh(lin(x))).sum()
    shown = autograd_lab.show(loss)
    (view,) = shown.trace["views"]
    names = {n.get("param") for n in view["graph"]["nodes"]} - {None}
    assert names == {"lin.weight", "lin.bias", "head.weight", "head.bias"}
    assert lin.weight.grad is None  # drawing is no backward pass
    assert "make_dot(loss)" in shown._repr_mimebundle_()["text/plain"]


def test_a_failing_cell_is_said_and_escaped(monkeypatch):
    doc = autograd_lab.trace("x = 1\nraise ValueError('<script>alert(1)</script>')\n", {},
                             name="<b>cell</b>")
    assert doc["error"]["type"] == "ValueError" and doc["error"]["line"] == 2
    bundle = autograd_lab.show(doc)._repr_mimebundle_()
    assert "line 2: ValueError" in bundle["text/plain"]
    assert "<script>" not in bundle["text/html"] and "<b>" not in bundle["text/html"]
    assert "&lt;script&gt;" in bundle["text/html"]


def test_without_dot_or_anywidget_the_output_says_what_to_install(monkeypatch, tmp_path):
    lin, head, x = _reused_layer()
    doc = autograd_lab.trace("(head(lin(x)).sum()).backward()\n",
                             {"lin": lin, "head": head, "x": x})
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no graphviz on it
    monkeypatch.setitem(sys.modules, "anywidget", None)  # `import anywidget` fails, as unextra'd
    bundle = autograd_lab.show(doc)._repr_mimebundle_()
    assert "image/svg+xml" not in bundle and WIDGET_VIEW not in bundle
    assert "`dot` is not installed" in bundle["text/plain"]
    assert "autograd-lab[notebook]" in bundle["text/plain"]
    # and in the HTML, which JupyterLab shows where text/plain is hidden behind it
    assert "`dot` is not installed" in bundle["text/html"]
    assert bundle[TRACE_MIMETYPE]["script"] == doc["script"]


def test_an_unknown_drawer_says_which_there_are():
    with pytest.raises(ValueError, match="kernel, browser"):
        autograd_lab.show({"events": []}, draw="gpu")
    with pytest.raises(ValueError, match="Usage"):
        parse_line("--draw gpu")
    assert parse_line("--draw browser").draw == "browser"


def test_bad_inputs_say_what_to_do(monkeypatch):
    monkeypatch.delenv("AUTOGRAD_LAB_URL", raising=False)
    with pytest.raises(ValueError, match="AUTOGRAD_LAB_URL"):
        autograd_lab.show("AbCdEf123456")
    with pytest.raises(ValueError, match="runs/ID"):
        autograd_lab.show("http://127.0.0.1:1/somewhere/else")
    with pytest.raises(ValueError, match="no grad_fn"):
        autograd_lab.show(torch.ones(2))
    with pytest.raises(TypeError, match="tensor, a Trace document"):
        autograd_lab.show(42)
    with pytest.raises(ValueError, match="not a Trace"):
        autograd_lab.show({"a": 1})
    with pytest.raises(ValueError, match="Usage"):
        parse_line("--layout sideways")
    assert parse_line("--event 2 --layout flat --name 'my step'").name == "my step"


def test_an_interrupt_stops_the_cell_and_leaves_nothing_patched():
    """Ctrl-C (or the kernel's interrupt) is the person's: the traced cell stops with it, and
    so do the cells after it, as without autograd-lab; the tracer's patches are all undone."""
    backward, grad = torch.Tensor.backward, torch.autograd.grad
    with pytest.raises(KeyboardInterrupt):
        autograd_lab.trace("import torch\nw = torch.ones(2, requires_grad=True)\n"
                           "raise KeyboardInterrupt\n")
    assert torch.Tensor.backward is backward and torch.autograd.grad is grad
    assert torch.is_grad_enabled() and not torch.is_anomaly_enabled()
    doc = autograd_lab.trace("import torch\nw = torch.ones(2, requires_grad=True)\n"
                             "(w * 2).sum().backward()\n")
    assert doc["error"] is None and contribution_sum(backward_events(doc)[0], "w").tolist() \
        == [2.0, 2.0]  # the next cell is traced as ever


def test_the_stored_trace_keeps_the_pass_drawn_and_is_still_a_trace():
    """The output's Trace (autograd_lab/stored.py) follows the schema, keeps the pass drawn
    whole (its graph and order) and counts the pass it dropped."""
    from app.format import validate

    lin, head, x = _reused_layer()
    doc = autograd_lab.trace("y = lin(x).sum()\ny.backward()\nz = head(lin(x)).sum()\n"
                             "z.backward()\n", {"lin": lin, "head": head, "x": x})
    first, second = backward_events(doc)
    stored = autograd_lab.show(doc, event=second["index"])._repr_mimebundle_()[TRACE_MIMETYPE]
    validate(stored)
    (kept,) = backward_events(stored)
    assert kept["index"] == second["index"] and kept["order"] == second["order"]
    assert kept["graph"]["nodes"] == second["graph"]["nodes"]
    assert stored["events_skipped"]["backward"] == doc["events_skipped"]["backward"] + 1


EARLIER_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.spare = nn.Linear(3, 3), nn.Linear(3, 3)  # spare: never in forward

    def forward(self, x):
        return self.used(x)

net, head = Net(), nn.Linear(3, 1)
layer = nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=8)
encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
x = torch.randn(4, 3)
"""
TRACED_CELL = "net(x).sum().backward()\n"  # uses net only: head and the encoder are earlier's


def test_a_module_an_earlier_cell_made_and_this_one_never_used_is_not_said_to_miss_a_grad():
    """Issue 37: a model from an earlier cell (`head`), unused by the traced cell, was said to
    have "received no gradient", as if by mistake. PyTorch, run plainly: its .grad stays None
    because nothing ever called it; `net.spare`, inside a model the cell did call, gets none
    from that call: that finding is true and stays."""
    plain: dict = {}
    exec(EARLIER_CELL, plain)  # noqa: S102
    called: set[str] = set()
    for name in ("net", "head", "layer", "encoder"):
        plain[name].register_forward_hook(lambda *_a, name=name: called.add(name))
    exec(TRACED_CELL, plain)  # noqa: S102
    assert called == {"net"}
    missed = {f"net.{n}" for n, p in plain["net"].named_parameters() if p.grad is None}
    assert missed == {"net.spare.weight", "net.spare.bias"}
    untouched = [p for name in ("head", "layer", "encoder") for p in plain[name].parameters()]
    assert untouched and all(p.grad is None for p in untouched)

    ns: dict = {}
    exec(EARLIER_CELL, ns)  # noqa: S102
    doc = autograd_lab.trace(TRACED_CELL, ns)
    assert doc["error"] is None
    said = {p for d in doc["diagnostics"] if d["code"] == "no_gradient" for p in d["params"]}
    assert said == missed  # only the called model's parameter, none of the untouched modules'
    for d in doc["diagnostics"]:
        assert "head" not in d["message"] and "layer" not in d["message"], d
    # the untouched ones are still listed, with .grad as PyTorch left it: None
    assert doc["params"]["head.weight"]["grad"] is None


def test_a_script_still_hears_of_a_layer_it_made_and_never_used():
    """The worker's run is the whole script: a layer it defines and never calls is its own
    mistake to hear of (PyTorch leaves that .grad None)."""
    from app.trace.tracer import trace_script

    plain: dict = {}
    exec(EARLIER_CELL + TRACED_CELL, plain)  # noqa: S102
    assert plain["head"].weight.grad is None
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "script.py"
        script.write_text(EARLIER_CELL + TRACED_CELL)
        doc = trace_script(script)
    said = {p for d in doc["diagnostics"] if d["code"] == "no_gradient" for p in d["params"]}
    assert {"head.weight", "head.bias", "net.spare.weight"} <= said
