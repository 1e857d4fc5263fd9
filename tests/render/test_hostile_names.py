"""Names that come from a script (its variables, modules, classes) or from a report it forged
reach DOT and the SVG the page inserts: none may leave its quotes, set an attribute, link
anywhere or be read as markup (issue 9, point 3)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from app.render import RenderError, render, render_graph, to_dot
from app.render.draw import MAX_DRAWN_EDGES

HOSTILE = [
    "ends with a backslash\\",
    'x"] [URL="javascript:alert(1)" label="',
    'end\\" URL="http://evil.example" target="_top" x="',
    "<<TABLE><TR><TD HREF=\"http://evil.example\">x</TD></TR></TABLE>>",
    "\\N \\G \\L \\E",
    "line\nbreak\r\x00and nul",
    "}; digraph evil { a -> b",
]
SVG = "{http://www.w3.org/2000/svg}"


def _graph(name: str) -> dict:
    return {"nodes": [
        {"id": "n0", "name": name, "label": name, "kind": "op", "line": 3, "module": name},
        {"id": "n1", "name": "AccumulateGrad", "label": name, "kind": "param", "param": name,
         "shape": [2, 2]},
        {"id": "n2", "name": name, "kind": "custom", "function": name}],
        "edges": [{"source": "n1", "target": "n0", "slot": 0, "shape": [2, 2]},
                  {"source": "n2", "target": "n0", "slot": 1}],
        "roots": ["n0"], "cuts": [{"param": name, "node": "n0", "source": "n1", "how": name}]}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_is_drawn_as_text_and_nothing_else(name):
    svg = render_graph(_graph(name), "svg")
    root = ET.fromstring(svg)
    for element in root.iter():
        attrs = {k.rsplit("}", 1)[-1].lower(): v for k, v in element.attrib.items()}
        assert "href" not in attrs and not any(a.startswith("on") for a in attrs)
        assert element.tag.rsplit("}", 1)[-1] not in ("script", "foreignObject")
    # every node is there, under its own id, and nothing else became a node or an edge
    def classes(g):
        return g.get("class", "").split()

    ids = {g.get("id") for g in root.iter(f"{SVG}g") if "node" in classes(g)}
    assert ids == {"n0", "n1", "n2"}
    edges = [g for g in root.iter(f"{SVG}g") if "edge" in classes(g)]
    assert len(edges) == 3
    # the name is shown as text (graphviz may split it into lines, never drop its characters)
    drawn = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    visible = "".join(c if c >= " " else " " for c in name).split()
    assert all(word in drawn for word in visible if len(word) > 3), (drawn, visible)


def test_the_dot_source_keeps_every_hostile_string_inside_its_quotes():
    for name in HOSTILE:
        source = to_dot(_graph(name))
        assert "URL=" not in source.replace('URL=\\"', "")  # only ever inside a quoted string
        render(source, "dot")


def test_an_svg_with_a_link_or_a_script_is_refused():
    for active in ('<a href="http://evil.example"><text>x</text></a>',
                   '<script>alert(1)</script>', '<g onclick="alert(1)"/>',
                   '<a xlink:href="javascript:alert(1)"><text>x</text></a>'):
        svg = ('<svg xmlns="http://www.w3.org/2000/svg" '
               f'xmlns:xlink="http://www.w3.org/1999/xlink">{active}</svg>').encode()
        from app.render.draw import check_inert
        with pytest.raises(RenderError, match="link or a script"):
            check_inert(svg)


def test_too_many_edges_are_refused_before_graphviz_runs():
    graph = _graph("w")
    graph["edges"] = [{"source": "n1", "target": "n0", "slot": i}
                      for i in range(MAX_DRAWN_EDGES + 1)]
    with pytest.raises(RenderError, match="edges"):
        render_graph(graph, "svg")
