"""graphviz compiled to WebAssembly, in a real Chromium (issue 22): the notebook widget's own
layout code (static/js/browser_layout.js, the vendored @hpcc-js/wasm-graphviz loaded from its
text as the widget loads it) draws the same graph as the machine's `dot` does from the same
DOT: the same nodes with the same classes (what the views find and colour by) and the same
edges. Their positions differ (graphviz 16 against Debian's 2.43), which the page never relies on.
A drawing that could act (a forged link or script) is refused, as the server refuses one."""

from __future__ import annotations

import re

import pytest

from tests.server import ROOT, serve_folder

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")

GRAPHVIZ = "vendor/hpcc-js-wasm-graphviz-1.29.2/graphviz.js"

LOAD = """async (url) => {
  const layout = await import("/js/browser_layout.js");
  const graphviz = await layout.loadGraphviz(await (await fetch(url)).text());
  window.layout = layout;
  window.graphviz = graphviz;
  return graphviz.version();
}"""


def _nodes(svg: str) -> dict[str, str]:
    return dict(re.findall(r'<g id="([^"]+)" class="(node[^"]*)"', svg))


def _edges(svg: str) -> list[str]:
    return sorted(re.findall(r'<g id="([^"]+)" class="edge', svg))


def _graphs() -> list[dict]:
    """A reused layer's backward pass, flat, and a 12-layer transformer's by module."""
    from torch import nn

    from app.render import choose_grouping, event_graph, group_graph
    from app.trace.in_namespace import trace_source

    torch.manual_seed(0)
    lin, head, x = nn.Linear(3, 3), nn.Linear(3, 1), torch.randn(4, 3)
    small = trace_source("head(torch.tanh(lin(torch.tanh(lin(x))))).sum().backward()\n",
                         {"lin": lin, "head": head, "x": x, "torch": torch})
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32)
    encoder = nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
    big = trace_source("encoder(torch.randn(5, 2, 16)).pow(2).mean().backward()\n",
                       {"encoder": encoder, "torch": torch})
    graph = event_graph(big)
    grouping = choose_grouping(graph)
    assert not grouping.flat  # the view a user first sees of a big model
    return [event_graph(small), group_graph(graph, grouping)]


def test_the_browser_draws_the_graph_dot_draws(browser):
    from app.render import drawable_dot, render

    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        with serve_folder(ROOT / "static") as base:
            page.goto(f"{base}/css/app.css")  # a page of the folder's origin
            version = page.evaluate(LOAD, f"{base}/{GRAPHVIZ}")
            assert version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 12
            for graph in _graphs():
                dot = drawable_dot(graph)
                machine = render(dot).decode()
                in_browser = page.evaluate("d => window.layout.layoutSvg(window.graphviz, d)",
                                           dot)
                ids = {n["id"] for n in graph["nodes"]}
                assert set(_nodes(in_browser)) == ids  # every node of the Trace's graph
                assert _nodes(in_browser) == _nodes(machine)  # ids and kind classes alike
                assert _edges(in_browser) == _edges(machine)
                assert len(_edges(in_browser)) >= len(graph["edges"]) > 0
    finally:
        page.close()
    assert not errors, errors


FORGED_SVG = [
    '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
    '<svg xmlns="http://www.w3.org/2000/svg"><g onclick="alert(1)"/></svg>',
    '<svg xmlns="http://www.w3.org/2000/svg"><foreignObject><p>x</p></foreignObject></svg>',
]


def test_a_drawing_that_could_act_is_refused(browser):
    """A DOT with a link (graphviz writes it as <a href>) and SVGs with a script, a handler or
    foreign HTML: each refused with the server's words; the next drawing is made as before."""
    page = browser.new_page()
    try:
        with serve_folder(ROOT / "static") as base:
            page.goto(f"{base}/css/app.css")
            page.evaluate(LOAD, f"{base}/{GRAPHVIZ}")
            said = page.evaluate("""([dot, svgs]) => [
                () => window.layout.layoutSvg(window.graphviz, dot),
                ...svgs.map((s) => () => window.layout.checkInert(s)),
                () => window.layout.layoutSvg(window.graphviz, "digraph { a -> b }"),
              ].map((f) => { try { f(); return "drawn"; } catch (e) { return e.message; } })""",
                ['digraph { a [URL="javascript:alert(1)"]; a -> b [href="https://x.test"] }',
                 FORGED_SVG])
    finally:
        page.close()
    *refused, after = said
    assert len(refused) == 4
    assert all("would carry a link or a script" in s for s in refused), said
    assert after == "drawn"
