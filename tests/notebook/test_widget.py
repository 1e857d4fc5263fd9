"""The notebook widget's JavaScript is the run page's own (issue 22: one source, no copy): the
module it sends is static/js/widget.js, and every module it reaches is the static file itself,
unchanged but for its relative import specifiers."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("anywidget")

from autograd_lab.widget import TraceWidget, modules_of, page_module  # noqa: E402
from tests.trace_facts import grad_fns  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STATIC_JS = ROOT / "static" / "js"
DATA_URL = re.compile(r'(["\'])data:text/javascript;base64,([A-Za-z0-9+/=]+)\1')


def _imports(text: str) -> set[str]:
    return set(re.findall(r'from\s*["\']\./([a-z_]+\.js)["\']', text))


def _unfold(text: str, found: dict[str, str]) -> str:
    """`text` with every data: URL put back as the "./name.js" it stands for, found by which
    static file it is once its own data: URLs are put back the same way."""
    def back(match: re.Match) -> str:
        inner = _unfold(base64.b64decode(match[2]).decode("utf-8"), found)
        names = [p.name for p in STATIC_JS.glob("*.js") if p.read_text(encoding="utf-8") == inner]
        assert len(names) == 1, inner[:200]
        found[names[0]] = inner
        return f"{match[1]}./{names[0]}{match[1]}"

    return DATA_URL.sub(back, text)


def test_the_widget_module_is_the_static_files_themselves():
    found: dict[str, str] = {}
    entry = _unfold(page_module("widget.js"), found)
    assert entry == (STATIC_JS / "widget.js").read_text(encoding="utf-8")
    # each module it reaches is byte for byte the page's file (found above by equality)
    assert set(found) == set(modules_of("widget.js")) - {"widget.js"}
    assert {"graph.js", "panel.js", "accumulation.js", "replay.js", "heatmap.js"} <= set(found)


def test_the_page_and_the_widget_load_the_same_view_modules():
    page = _imports((STATIC_JS / "trace_page.js").read_text(encoding="utf-8"))
    widget = _imports((STATIC_JS / "widget.js").read_text(encoding="utf-8"))
    # every view module the widget uses, the run page uses; browser_layout.js is no view: it
    # lays a graph out where the kernel has no `dot` (the page's drawings are the server's)
    assert widget - {"browser_layout.js"} <= page
    assert "browser_layout.js" not in modules_of("trace_page.js")
    assert {"graph.js", "panel.js", "accumulation.js", "replay.js"} <= widget
    # and no view code lives in the Python package: nothing to drift from the page's
    assert not [p for p in (ROOT / "autograd_lab").rglob("*") if p.suffix in (".js", ".mjs")]


def test_the_trace_travels_gzipped_and_comes_back_whole():
    doc = {"format": "autograd-lab/trace@1", "events": [], "params": {}, "note": "ü" * 1000}
    widget = TraceWidget(doc, event=None, svg=None, summary="s")
    assert json.loads(gzip.decompress(widget.trace_gz)) == doc == widget.trace
    assert len(widget.trace_gz) < len(json.dumps(doc)) / 4
    assert widget.css.startswith(":host") or ":host {" in widget.css  # the page's :root, read


def _reused_layer_trace() -> dict:
    import torch
    from torch import nn

    import autograd_lab

    torch.manual_seed(0)
    lin, head, x = nn.Linear(3, 3), nn.Linear(3, 1), torch.randn(4, 3)
    return autograd_lab.trace("head(torch.tanh(lin(torch.tanh(lin(x))))).sum().backward()\n",
                              {"lin": lin, "head": head, "x": x, "torch": torch})


def test_without_dot_the_widget_carries_the_pages_dot_and_graphviz_in_webassembly(
        monkeypatch, tmp_path):
    """No `dot` where the kernel runs: no static picture, and the live view gets the DOT the
    server would give graphviz and the vendored graphviz module to lay it out in the browser."""
    import autograd_lab
    from app.render import drawable_dot, event_graph

    doc = _reused_layer_trace()
    with_dot = autograd_lab.show(doc)
    assert "image/svg+xml" in with_dot._repr_mimebundle_()
    assert with_dot.live.svg and not with_dot.live.dot
    assert with_dot.live.graphviz_gz == b""  # 630 KB sent only where it is needed

    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no graphviz on it
    shown = autograd_lab.show(doc)
    bundle = shown._repr_mimebundle_()
    assert "image/svg+xml" not in bundle
    assert "lays the graph out in the browser" in bundle["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle
    live = shown.live
    assert live.svg == "" and live.dot == drawable_dot(event_graph(doc))
    vendored = ROOT / "static" / "vendor" / "hpcc-js-wasm-graphviz-1.29.2"
    assert gzip.decompress(live.graphviz_gz) == (vendored / "graphviz.js").read_bytes()
    assert "Apache License" in (vendored / "LICENSE").read_text()
    assert "1.29.2" in (vendored / "VERSION").read_text()


def test_draw_browser_lays_out_in_the_browser_even_where_dot_is():
    import autograd_lab

    shown = autograd_lab.show(_reused_layer_trace(), draw="browser")
    bundle = shown._repr_mimebundle_()
    assert "image/svg+xml" not in bundle and "not installed" not in bundle["text/plain"]
    assert shown.live.dot.startswith("digraph") and shown.live.graphviz_gz


def test_a_tensors_graph_is_a_view_with_no_pass_to_replay(monkeypatch, tmp_path):
    import torch

    import autograd_lab

    w = torch.randn(3, requires_grad=True)
    loss = (w * 2).sum()
    monkeypatch.setenv("PATH", str(tmp_path))
    shown = autograd_lab.show(loss)
    shown._repr_mimebundle_()
    assert shown.live.event is None and shown.live.view == 0
    assert shown.live.dot.startswith("digraph")


# ---- issue 37, point 4: what the widget's controls ask of the kernel -------------------------

# a model of 300+ nodes (six blocks of twelve layers): drawn as the page draws it, its
# repeated blocks folded
MODEL = """import torch
from torch import nn
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(4, 4) for _ in range(12)])
    def forward(self, x):
        for lin in self.lins:
            x = torch.relu(lin(x))
        return x
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers, self.head = nn.ModuleList([Block() for _ in range(6)]), nn.Linear(4, 1)
    def forward(self, x):
        for block in self.layers:
            x = block(x)
        return self.head(x)
model = Net()
x, y = torch.randn(5, 4), torch.randn(5, 1)
"""
TRAINED = ("loss = nn.functional.mse_loss(model(x), y)\nloss.backward()\n"
           "model.head(x).pow(2).sum().backward()\n")


def _model_cell(number: int = 1) -> tuple[dict, str]:
    """MODEL run as a kernel runs a cell: compiled under a file name of its own, its lines in
    linecache (IPython's CachingCompiler does both). The namespace, and that file name."""
    import linecache

    filename = f"/tmp/ipykernel_0/model_cell_{number}.py"
    linecache.cache[filename] = (len(MODEL), None, MODEL.splitlines(True), filename)
    ns: dict = {}
    exec(compile(MODEL, filename, "exec"), ns)  # noqa: S102 - the test's own cell
    return ns, filename


def _trained(ns: dict, cells: dict | None = None) -> dict:
    from app.trace.in_namespace import trace_source

    return trace_source(TRAINED, ns, above="%%autograd_lab", cells=cells)


def _drawn_ids(svg: str, kind: str) -> list[str]:
    return re.findall(rf'<g id="([^"]+)" class="node kind(?:-|&#45;){kind}"', svg)


def test_a_click_on_a_fold_is_drawn_by_the_kernel_with_its_blocks():
    from autograd_lab.display import TraceDisplay

    ns, _ = _model_cell()
    shown = TraceDisplay(_trained(ns))
    shown._repr_mimebundle_()
    live = shown.live
    layers = ns["model"].layers
    folds = [u for u in live.units if u["kind"] == "fold"]
    assert len(folds) == 1 and folds[0]["repeat"] == len(layers)
    assert _drawn_ids(live.svg, "fold") == [folds[0]["id"]]
    assert live.redraws and live.opened == [] and live.drawn == 0
    # the view asks for the fold open (widget.js openUnit): its blocks, closed, one per layer
    live.asked = {"event": live.event, "opened": [folds[0]["path"]]}
    assert live.problem == "" and live.drawn == 1 and live.opened == [folds[0]["path"]]
    blocks = sorted(u["path"] for u in live.units if u["kind"] == "module")
    assert blocks == sorted(f"layers.{i}" for i in range(len(layers)))
    assert not _drawn_ids(live.svg, "fold")
    assert sorted(_drawn_ids(live.svg, "module")) == sorted(u["id"] for u in live.units)
    # closed again ("Close what I opened")
    live.asked = {"event": live.event, "opened": []}
    assert live.drawn == 2 and [u["kind"] for u in live.units] == ["fold"]


def test_an_event_button_draws_that_backward_pass():
    from autograd_lab.display import TraceDisplay

    ns, _ = _model_cell()
    doc = _trained(ns)
    passes = [e["index"] for e in doc["events"] if e["kind"] == "backward"]
    assert len(passes) == TRAINED.count(".backward()")
    shown = TraceDisplay(doc)
    shown._repr_mimebundle_()
    live = shown.live
    assert live.event == passes[0]
    live.asked = {"event": passes[1], "opened": []}
    assert live.event == passes[1] and live.drawn == 1 and live.units == []
    # the second pass as PyTorch builds it: one drawn op per grad_fn, AccumulateGrad aside
    out = ns["model"].head(ns["x"]).pow(2).sum()
    ops = [f for f in grad_fns(out.grad_fn) if type(f).__name__ != "AccumulateGrad"]
    assert len(_drawn_ids(live.svg, "op")) == len(ops)
    for fn in ops:
        assert f">{type(fn).__name__}</text>" in live.svg


def test_what_the_kernel_cannot_draw_is_said_and_nothing_is_redrawn():
    from autograd_lab.display import TraceDisplay

    ns, _ = _model_cell()
    doc = _trained(ns)
    shown = TraceDisplay(doc)
    shown._repr_mimebundle_()
    live, svg = shown.live, shown.live.svg
    live.asked = {"event": 99, "opened": []}
    assert live.problem == "No drawing: this run has no backward pass 99." and live.drawn == 0
    live.asked = {"event": live.event, "opened": "layers"}
    assert "cannot read" in live.problem and live.drawn == 0 and live.svg == svg


def test_an_op_written_in_another_cell_says_that_cell_and_line():
    """A model defined in cell [1] and used in a traced cell: its ops say cell 1's lines, where
    Python compiled them, and the traced cell's calling line stays the node's `line`."""
    import dis

    from app.format import validate
    from app.render import event_graph, render_graph

    ns, filename = _model_cell(number=1)
    doc = _trained(ns, cells={filename: 1})
    validate(doc)
    graph = event_graph(doc, doc["events"][0]["index"])
    # the line Python compiled `self.head(x)` on, in Net.forward
    head_line = next(i.positions.lineno for i in dis.get_instructions(ns["Net"].forward)
                     if i.argval == "head")
    relu_line = next(i.positions.lineno for i in dis.get_instructions(ns["Block"].forward)
                     if i.argval == "relu")
    calling = TRAINED.split("\n").index("loss = nn.functional.mse_loss(model(x), y)") + 2
    ops = [n for n in graph["nodes"] if n["kind"] == "op"]
    head = [n for n in ops if n.get("module") == "head"]
    assert head and all(n["cell_line"] == {"cell": 1, "line": head_line} for n in head)
    relus = [n for n in ops if n["name"] == "ReluBackward0"]
    assert len(relus) == 6 * 12
    assert all(n["cell_line"] == {"cell": 1, "line": relu_line} for n in relus)
    assert all(n["line"] == calling for n in head + relus)
    # the loss is made in the traced cell itself: no other cell's line
    mse = next(n for n in ops if n["name"] == type(ns["loss"].grad_fn).__name__)
    assert "cell_line" not in mse and mse["line"] == calling
    # the drawing's tooltips say it too
    svg = render_graph(graph).decode()
    assert f"AddmmBackward0 — cell 1, line {head_line}" in svg
    # the second pass calls the head from the traced cell itself: its line there alone
    second = event_graph(doc, doc["events"][1]["index"])
    assert not any("cell_line" in n for n in second["nodes"])


def test_without_the_kernel_s_cell_map_no_other_cell_is_named():
    ns, _ = _model_cell()
    doc = _trained(ns)
    assert not any("cell_line" in n for e in doc["events"] if e["kind"] == "backward"
                   for n in e["graph"]["nodes"])
