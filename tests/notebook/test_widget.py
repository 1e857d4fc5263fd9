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
    assert widget <= page  # every view module the widget uses, the run page uses
    assert {"graph.js", "panel.js", "accumulation.js", "replay.js"} <= widget
    # and no view code lives in the Python package: nothing to drift from the page's
    assert not [p for p in (ROOT / "autograd_lab").rglob("*") if p.suffix in (".js", ".mjs")]


def test_the_trace_travels_gzipped_and_comes_back_whole():
    doc = {"format": "autograd-lab/trace@1", "events": [], "params": {}, "note": "ü" * 1000}
    widget = TraceWidget(doc, event=None, svg=None, summary="s")
    assert json.loads(gzip.decompress(widget.trace_gz)) == doc == widget.trace
    assert len(widget.trace_gz) < len(json.dumps(doc)) / 4
    assert widget.css.startswith(":host") or ":host {" in widget.css  # the page's :root, read
