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
