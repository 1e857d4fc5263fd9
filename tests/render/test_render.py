"""Drawing: real graphviz, ids shared with the Trace, the legend defined once."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from app.format import load_schema
from app.render import KINDS, RenderError, event_graph, render_graph, to_dot

SVG = "{http://www.w3.org/2000/svg}"

SCRIPT = """
import torch
from torch import nn
torch.manual_seed(0)
lin = nn.Linear(3, 2)
x = torch.randn(4, 3)
y = lin(lin(torch.randn(4, 3) @ torch.ones(3, 3))[:, :2] @ torch.ones(2, 3))
y.sum().backward()
"""


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    from app.trace.tracer import trace_script

    path = tmp_path_factory.mktemp("render") / "two_uses.py"
    path.write_text(SCRIPT)
    return trace_script(path)


def test_svg_node_ids_are_trace_node_ids(doc):
    graph = event_graph(doc)
    root = ET.fromstring(render_graph(graph, "svg"))
    groups = {g.get("id"): g for g in root.iter(f"{SVG}g")}
    node_ids = {g.get("id") for g in groups.values() if "node" in (g.get("class") or "")}
    assert node_ids == {n["id"] for n in graph["nodes"]}
    for n in graph["nodes"]:
        assert f"kind-{n['kind']}" in groups[n["id"]].get("class")
    edge_ids = {g.get("id") for g in groups.values() if "edge" in (g.get("class") or "")}
    assert len(edge_ids) == len(graph["edges"])


def test_edges_are_labelled_with_shapes(doc):
    graph = event_graph(doc)
    dot = to_dot(graph)
    weight = next(n for n in graph["nodes"] if n.get("param") == "weight")
    into_weight = [e for e in graph["edges"] if e["source"] == weight["id"]]
    assert len(into_weight) == 2  # the layer is used twice
    for e in into_weight:
        assert e["shape"] == [2, 3]
    assert 'label="(2, 3)"' in dot


def test_png_and_dot_outputs(doc):
    graph = event_graph(doc)
    assert render_graph(graph, "png").startswith(b"\x89PNG\r\n\x1a\n")
    assert render_graph(graph, "dot").decode().startswith("digraph autograd {")


def test_legend_covers_every_node_kind_of_the_schema():
    kinds = set(load_schema()["$defs"]["node"]["properties"]["kind"]["enum"])
    assert set(KINDS) == kinds
    # told apart without colour: no two kinds share both shape and outline style
    assert len({(k["shape"], k["style"]) for k in KINDS.values()}) == len(KINDS)


def test_missing_dot_is_a_clear_error(doc, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no graphviz on it
    with pytest.raises(RenderError, match="apt-get install graphviz"):
        render_graph(event_graph(doc), "svg")


def test_unknown_event_and_format(doc):
    with pytest.raises(LookupError, match="not a backward event"):
        event_graph(doc, 99)
    with pytest.raises(RenderError, match="unknown format"):
        render_graph(event_graph(doc), "gif")


def test_a_graph_too_large_to_lay_out_flat_is_refused_with_what_to_draw_instead():
    graph = {"nodes": [{"id": f"n{i}", "name": "MulBackward0", "kind": "op"}
                       for i in range(25_000)], "edges": [], "roots": []}
    with pytest.raises(RenderError, match="25,000 nodes.*Draw it by module instead"):
        render_graph(graph, "svg")


def test_names_from_a_script_are_text_not_markup():
    """A custom Function or variable named like a graphviz HTML label must not become one."""
    evil = '<<TABLE><TR><TD HREF="javascript:alert(1)">x</TD></TR></TABLE>>'
    graph = {"nodes": [{"id": "n0", "name": evil, "label": evil, "kind": "op"},
                       {"id": "out0", "name": "output", "label": evil, "kind": "output",
                        "shape": []}],
             "edges": [{"source": "n0", "target": "out0", "slot": 0, "shape": []}],
             "roots": ["n0"]}
    svg = render_graph(graph, "svg").decode()
    assert "xlink:href" not in svg  # no link anywhere in the drawing
    assert "&lt;&lt;TABLE&gt;" in svg  # the name is shown as the text it is
    ET.fromstring(svg)
