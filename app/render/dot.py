"""A Trace event's graph as DOT source. Node ids in the DOT (and so in the SVG) are the Trace's
own node ids, so the page can go from a drawn node to its record and back.

Every string drawn comes from the script (names of its variables, modules, classes) or from a
report it could have written itself, so each goes through `_text`: no string can end its DOT
quotes, add attributes (URL=, href=) or be read as a graphviz escape (\\N, \\G) or HTML label.
"""

from __future__ import annotations

import re
from collections import Counter

import graphviz
from graphviz import nohtml

from app.format.notebook import where

from .legend import EDGE_COLOR, KINDS, UNIT_KINDS

_STYLES = {**KINDS, **UNIT_KINDS}

__all__ = ["EventNotFound", "FONT_SCALES", "event_graph", "font_scale", "to_dot", "edge_id"]


class EventNotFound(LookupError):
    """The trace has no backward event of that index (or none at all) to draw."""


def event_graph(doc: dict, event: int | None = None, view: int | None = None) -> dict:
    """The graph of backward event `event` (default: the first backward event), or, with
    `view`, of the graph the script asked to see (a make_dot call, a gradient's graph). An
    uploaded notebook's nodes say where they were made as "cell N, line M" (`where`)."""
    return _said_by_cell(doc, _event_graph(doc, event, view))


def _said_by_cell(doc: dict, graph: dict) -> dict:
    """For a notebook's run, the graph with each node's line in the notebook's words, on copies
    of the nodes (the Trace itself may be held, parsed, for other requests)."""
    script = doc.get("script")
    notebook = script.get("notebook") if isinstance(script, dict) else None
    if not notebook and not any(n.get("cell_line") for n in graph["nodes"]):
        return graph
    cells = notebook["cells"] if notebook else []

    def said(node: dict) -> str | None:
        # written in another cell of the kernel (a model defined earlier): that cell's line
        elsewhere = node.get("cell_line")
        if elsewhere:
            return f"cell {elsewhere['cell']}, line {elsewhere['line']}"
        return where(cells, node["line"]) if node.get("line") and cells else None

    return {**graph, "nodes": [{**n, "where": said(n)} if said(n) else n
                               for n in graph["nodes"]]}


def _event_graph(doc: dict, event: int | None, view: int | None) -> dict:
    if view is not None:
        views = doc.get("views") or []
        if not 0 <= view < len(views):
            raise EventNotFound(f"this trace has {len(views)} view(s) (make_dot calls and "
                                "gradients' graphs); views are numbered from 0")
        return views[view]["graph"]
    backward = [e for e in doc.get("events", []) if e.get("kind") == "backward"]
    if not backward:
        raise EventNotFound("this trace has no backward event, so there is no graph to draw")
    if event is None:
        return backward[0]["graph"]
    for e in backward:
        if e["index"] == event:
            return e["graph"]
    raise EventNotFound(f"event {event} is not a backward event of this trace "
                      f"(backward events: {', '.join(str(e['index']) for e in backward)})")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _text(value: object) -> str:
    """A string as DOT text, marked as no HTML: control characters become spaces, and every
    backslash is doubled, so that none can escape the closing quote (graphviz's `quote` only
    warns about a trailing one) or start an escape sequence; `quote` escapes the quotes."""
    return nohtml(_CONTROL.sub(" ", str(value)).replace("\\", "\\\\"))


def edge_id(edge: dict) -> str:
    return f"e-{edge['source']}-{edge['target']}-{edge['slot']}"


def _shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")" if shape is not None else ""


def _label(node: dict) -> str:
    """The node's label; its two lines are joined by DOT's own line break, after escaping."""
    label = node.get("label") or node["name"]
    if node["kind"] in ("param", "leaf", "output"):
        return f"{_text(label)}\\n{_text(_shape(node.get('shape')))}"
    if node["kind"] == "custom" and node.get("function"):
        return f"{_text(node['name'])}\\n[{_text(node['function'])}]"
    if node["kind"] in ("module", "fold"):
        params = node.get("param_count", len(node.get("params") or ()))
        return (f"{_text(label)}\\n{node.get('ops', 0)} ops"
                + (f" · {params} params" if params else ""))
    return _text(label)


SHARED_ABOVE = 4  # uses of one leaf above which a big flat graph draws it beside each use


def _node(dot: graphviz.Digraph, node: dict, node_id: str, copy: bool = False) -> None:
    style = _STYLES.get(node["kind"], KINDS["op"])
    said = node.get("where") or (f"line {node['line']}" if node.get("line") else "")
    tooltip = node["name"] + (f" — {said}" if said else "")
    # nohtml (in _text): a name like "<<TABLE>...>>" (from a script's own class or variable
    # names) is text, never a graphviz HTML label that could carry a link into the page
    dot.node(_text(node_id), nohtml(_label(node)), id=_text(node_id),
             tooltip=_text(tooltip + (" (drawn again beside this use)" if copy else "")),
             shape=style["shape"], style=style["style"], fillcolor=style["fill"],
             fontcolor=style["text"],
             **{"class": f"kind-{node['kind']}" + (" use-copy" if copy else "")})


FONT_SCALES = (1.0, 1.5, 2.0, 2.5, 3.0)  # the label type a drawing may be asked for


def font_scale(value: float) -> float:
    """The nearest of FONT_SCALES: requests that differ by a little share one drawing."""
    return min(FONT_SCALES, key=lambda s: abs(s - value))


def _size(value: float) -> str:
    return f"{value:g}"


def to_dot(graph: dict, title: str | None = None, compact: bool = False,
           font: float = 1.0) -> str:
    """DOT for `graph`; `compact` leaves the tensor shapes off the edges (big graphs). `font`
    scales the label type (and the lines with it) while the space between ranks and nodes
    grows less or shrinks: a page that shows labels at a given size on screen (a projector's
    24 px) fits more of the graph in view than it would by zooming the 1x drawing."""
    font = font_scale(font)
    dot = graphviz.Digraph("autograd", graph_attr={
        "rankdir": "TB", "fontname": "Helvetica", "bgcolor": "white",
        "nodesep": _size(max(0.15, 0.3 / font)), "ranksep": _size(max(0.2, 0.4 / font)),
        **({"label": title, "labelloc": "t"} if title else {}),
        # a big flat graph: fewer network-simplex iterations for x positions (app/render/draw)
        **({"nslimit": "0.05", "nslimit1": "0.05"} if compact else {})})
    # sized for a projector: the page zooms out to fit, and 11 pt labels then became unreadable
    dot.attr("node", fontname="Helvetica", fontsize=_size(14 * font),
             penwidth=_size(1.4 * font))
    dot.attr("edge", fontname="Helvetica", fontsize=_size(12 * font), color=EDGE_COLOR,
             fontcolor=EDGE_COLOR,
             **({"penwidth": _size(font), "arrowsize": _size(font)} if font != 1 else {}))
    by_id = {}
    for node in graph["nodes"]:
        by_id[node["id"]] = node
        _node(dot, node, node["id"])
    # a big flat graph: a leaf used many times (an unrolled RNN's weights, used at every step)
    # is drawn again beside each use after its first. One node with 200 edges across 1,600
    # ranks gave graphviz a million virtual nodes and minutes of work; the copies say the same
    used: dict[str, int] = {}
    shared = set()
    if compact:
        fanout = Counter(e["source"] for e in graph["edges"])
        shared = {n for n, k in fanout.items() if k > SHARED_ABOVE
                  and by_id.get(n, {}).get("kind") in ("param", "leaf")}
    for edge in graph["edges"]:
        source, eid = edge["source"], edge_id(edge)  # the Trace's edge id, copy or not
        if source in shared:
            used[source] = used.get(source, 0) + 1
            if used[source] > 1:
                source = f"{source}-use{used[source]}"
                _node(dot, by_id[edge["source"]], source, copy=True)
        edge = {**edge, "source": source}
        count = edge.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            count = 1  # a forged report may put anything here
        label = _shape(edge.get("shape")) if count == 1 or "shape" in edge else f"{count} edges"
        dtype = edge.get("dtype")
        if isinstance(dtype, str) and dtype != "float32" and label:
            # a gradient in another dtype (autocast's bfloat16, float16) says so on its edge
            label = f"{label} {dtype}"
        if compact:
            label = ""
        dot.edge(_text(edge["source"]), _text(edge["target"]), id=_text(eid),
                 label=_text(label),
                 penwidth=str(min(1 + count / 4, 4) * font) if count > 1 else None,
                 **{"class": "grad-edge"})
    for cut in graph.get("cuts", ()):
        if cut.get("source") is None:
            continue
        # no gradient flows here: dashed, and it does not pull the layout about
        dot.edge(_text(cut["source"]), _text(cut["node"]),
                 id=_text(f"cut-{cut['source']}-{cut['node']}"),
                 label=_text(f"cut: {cut['how'] or 'no edge'}"), style="dashed", color="#D55E00",
                 fontcolor="#D55E00", arrowhead="tee", constraint="false",
                 **{"class": "cut-edge"})
    return dot.source
