"""The graph walked by keyboard alone (static/js/graph_keys.js), in a real Chromium: one Tab
stop for the whole graph, arrows along the Trace's edges (↓ towards the output, ↑ towards the
inputs, ← → among siblings), the view panned to each node focused, a focus ring that stands out
on every node kind, and `F` to the findings. Every expectation comes from the Trace the page
reads (the API), not from the page's own code."""

from __future__ import annotations

import re

import pytest

from app.render.legend import KINDS

from .conftest import api_trace, box, inside, open_scenario, screen, settled

pytestmark = pytest.mark.browser

FOCUSED = ("() => { const g = document.activeElement.closest('#graph g.node');"
           " return g ? g.id : null; }")


def edges_of(doc: dict) -> tuple[dict, dict, dict]:
    """(nodes by id, feeds: id -> ids it feeds (towards the output), takes: id -> its inputs)
    of the first backward pass, as the Trace records them."""
    event = next(e for e in doc["events"] if e["kind"] == "backward")
    nodes = {n["id"]: n for n in event["graph"]["nodes"]}
    feeds: dict[str, set] = {i: set() for i in nodes}
    takes: dict[str, set] = {i: set() for i in nodes}
    for e in event["graph"]["edges"]:
        feeds[e["source"]].add(e["target"])
        takes[e["target"]].add(e["source"])
    return nodes, feeds, takes


def focused(page) -> str | None:
    return page.evaluate(FOCUSED)


def press(page, key: str) -> str | None:
    page.keyboard.press(key)
    settled(page)  # the pan is drawn: the box measured is where the node is seen
    return focused(page)


def seen(page) -> dict:
    """The part of the graph area on screen."""
    area, view = box(page, "#graph"), screen(page)
    x, y = max(area["x"], 0), max(area["y"], 0)
    right, bottom = min(area["right"], view["right"]), min(area["bottom"], view["bottom"])
    return {"x": x, "y": y, "right": right, "bottom": bottom}


def node_box(page, node_id: str) -> dict:
    """The node's own shape on screen (its badges may stick out of the drawing)."""
    return box(page, f"#graph g.node#{node_id} :is(path, polygon, ellipse)")


def assert_in_view(page, node_id: str) -> None:
    """The node, and its focus ring when it has one, inside the part of the graph seen."""
    ring = page.locator(f"#graph g.node#{node_id} + .focus-ring .focus-line")
    shown = ring.count() and ring.is_visible()
    b, area = (box(page, f"#graph g.node#{node_id} + .focus-ring .focus-line") if shown
               else node_box(page, node_id)), seen(page)
    assert inside(b, area), f"{node_id} at {b} is outside the graph's visible area {area}"


def tab_into_graph(page) -> tuple[str, int]:
    """Tab from the top of the page until a node has focus: (that node, Tabs pressed)."""
    page.locator("body").focus()
    for tabs in range(1, 60):
        node = press(page, "Tab")
        if node:
            return node, tabs
    raise AssertionError("60 Tabs never reached the graph")


def test_one_tab_stop_and_arrows_follow_the_edges(watched):
    page = watched.page
    open_scenario(watched, "reused_layer", "k=3")
    nodes, feeds, takes = edges_of(api_trace(watched, "reused_layer", "k=3"))
    # zoomed in (keys only), most of the graph is outside the view: each step has to pan
    for _ in range(3):
        page.keyboard.press("+")
    start, _ = tab_into_graph(page)
    assert nodes[start]["kind"] == "output"  # the walk starts where backward does
    assert_in_view(page, start)

    # ↑ up to a parameter (drawn at the top), each step to an input of the last along a Trace edge
    path = [start]
    while takes[path[-1]] and len(path) <= len(nodes):
        node = press(page, "ArrowUp")
        assert node in takes[path[-1]], (
            f"↑ from {path[-1]} went to {node}, not one of its inputs {takes[path[-1]]}")
        assert_in_view(page, node)
        path.append(node)
    assert nodes[path[-1]]["kind"] in ("param", "leaf")
    assert press(page, "ArrowUp") == path[-1]  # an input has no inputs: focus stays
    # a parameter in 1 Tab (from the page's top: every stop before the graph) and a few arrows,
    # where it took 38 Tabs in drawing order
    assert any(nodes[n]["kind"] == "param" for n in path)
    watched.shot("walked-down")

    # ↓ goes back the way it came, down the drawing, each step to a node the last one feeds
    for back in reversed(path[:-1]):
        here = focused(page)
        node = press(page, "ArrowDown")
        assert node in feeds[here] and node == back, (
            f"↓ from {here} went to {node}, not back to {back}")
        assert_in_view(page, node)
    assert press(page, "ArrowDown") == start  # the output feeds nothing

    # the graph is one Tab stop: the next Tab leaves it, Shift+Tab comes back to the last node
    page.keyboard.press("Tab")
    assert focused(page) is None
    assert press(page, "Shift+Tab") == start
    assert "step=" not in page.url  # no arrow on a node stepped the replay


def test_left_and_right_walk_the_siblings_in_drawing_order(watched):
    page = watched.page
    open_scenario(watched, "reused_layer", "k=3")
    nodes, feeds, takes = edges_of(api_trace(watched, "reused_layer", "k=3"))
    node, _ = tab_into_graph(page)
    # up to the first node with several inputs (an addmm: bias, input and weight)
    for _ in nodes:
        if len(takes[node]) >= 2:
            break
        step = press(page, "ArrowUp")
        assert step in takes[node], f"↑ from {node} went to {step}"
        node = step
    parent = node
    siblings = takes[parent]
    node = press(page, "ArrowUp")
    assert node in siblings
    # ← to the leftmost, then → across: every input of the parent, left to right on screen
    for _ in range(len(siblings)):
        node = press(page, "ArrowLeft")
        assert node in siblings
    visited = [node]
    for _ in range(len(siblings)):
        node = press(page, "ArrowRight")
        assert node in siblings, f"→ left the parent's inputs {siblings} for {node}"
        assert_in_view(page, node)
        if node != visited[-1]:
            visited.append(node)
    assert set(visited) == siblings
    xs = [node_box(page, n)["x"] + node_box(page, n)["width"] / 2 for n in visited]
    assert xs == sorted(xs), f"siblings {visited} not walked left to right: {xs}"
    # and ↓ from any of them goes back to the node they share
    assert press(page, "ArrowDown") == parent


def ring_colour(page, node_id: str) -> dict:
    return page.evaluate("""id => {
      const g = document.querySelector(`#graph g.node#${CSS.escape(id)}`);
      const ring = g.nextElementSibling;
      if (!ring || !ring.classList.contains('focus-ring')) return null;
      const line = ring.querySelector('.focus-line');
      const shape = g.querySelector('path, polygon, ellipse');
      const r = line.getBoundingClientRect(), s = shape.getBoundingClientRect();
      return { display: getComputedStyle(ring).display, line: getComputedStyle(line).stroke,
               width: parseFloat(getComputedStyle(line).strokeWidth),
               halo: getComputedStyle(ring.querySelector('.focus-halo')).stroke,
               fill: getComputedStyle(shape).fill,
               encloses: r.left < s.left && r.top < s.top && r.right > s.right
                 && r.bottom > s.bottom };
    }""", node_id)


def rgb(css: str) -> tuple[float, float, float]:
    return tuple(float(v) for v in re.findall(r"[\d.]+", css)[:3])


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two CSS colours."""
    def lum(c):
        lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
               for v in (x / 255 for x in rgb(c))]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_focus_ring_stands_out_on_every_node_kind(watched):
    page = watched.page
    checked = set()
    # the two scenarios together draw every kind the legend names
    for scenario in ("reused_layer", "custom_function"):
        open_scenario(watched, scenario)
        nodes, _, _ = edges_of(api_trace(watched, scenario))
        tab_into_graph(page)  # keyboard focus: what the ring is for
        kinds = {}
        for node in nodes.values():
            kinds.setdefault(node["kind"], node["id"])
        for kind, node_id in kinds.items():
            # focus moved by script from a node the keyboard focused is still keyboard focus
            page.evaluate("id => document.getElementById(id).focus()", node_id)
            settled(page)
            ring = ring_colour(page, node_id)
            assert ring and ring["display"] != "none", f"no focus ring on the {kind} node {node_id}"
            # WCAG 1.4.11: 3:1 against the node's own fill (a parameter's ring was blue on blue,
            # 2.2:1) and against the page; the halo keeps it apart from the node's outline
            assert contrast(ring["line"], ring["fill"]) >= 3, (kind, ring)
            assert contrast(ring["line"], "rgb(255, 255, 255)") >= 3, (kind, ring)
            assert contrast(ring["line"], ring["halo"]) >= 3, (kind, ring)
            assert ring["width"] >= 3 and ring["encloses"], (kind, ring)
            assert_in_view(page, node_id)
            checked.add(kind)
        watched.shot(f"ring-{scenario}")
    assert checked >= set(KINDS), f"kinds never focused: {set(KINDS) - checked}"
    # a node picked with the mouse (which leaves focus where it was) is where Tab comes in
    page.click("#zoom-fit")
    page.click(f"#graph g.node#{kinds['op']}")
    assert focused(page) is None
    for _ in range(5):
        if press(page, "Tab"):
            break
    assert focused(page) == kinds["op"]
    assert ring_colour(page, kinds["op"])["display"] != "none"


def test_f_moves_focus_to_the_findings(watched):
    page = watched.page
    open_scenario(watched, "no_grad_inference_detach")
    findings = api_trace(watched, "no_grad_inference_detach")["diagnostics"]
    assert findings  # the scenario has some: what F must reach
    page.locator("body").focus()
    page.keyboard.press("f")
    # the strip above the graph (findings.js): its first line, the most serious finding's
    first = next(d for level in ("error", "warning", "info") for d in findings
                 if d["level"] == level)
    said = page.evaluate("() => { const d = document.activeElement.closest('#findings');"
                         " return d ? document.activeElement.textContent : null; }")
    assert said and first["message"].split("`")[1] in said, said
    assert inside(box(page, "#findings"), screen(page))  # on the first screen
    assert page.locator("#diagnostics-list li").count() == len(findings)
    watched.shot("findings")
    # from a node of the graph too: F is not taken by the graph
    node, _ = tab_into_graph(page)
    assert node
    page.keyboard.press("F")
    assert page.evaluate("() => Boolean(document.activeElement.closest('#findings'))")


def test_f_without_findings_says_so_and_leaves_focus(watched):
    page = watched.page
    open_scenario(watched, "stop_gradient")
    assert not api_trace(watched, "stop_gradient")["diagnostics"]
    node, _ = tab_into_graph(page)
    page.keyboard.press("f")
    assert focused(page) == node
    assert page.text_content("#keys-said") == "This run has no findings to show."


def test_in_presenter_mode_the_arrows_aside_still_step_the_narration(watched):
    """Presenter mode keeps ← and → whatever has focus (trace_page.js); ↓ and ↑ still walk."""
    page = watched.page
    open_scenario(watched, "reused_layer", "k=3")
    _, _, takes = edges_of(api_trace(watched, "reused_layer", "k=3"))
    page.keyboard.press("p")
    page.wait_for_selector("#presenter", state="visible")
    # the presenter's drawing, in its larger type (3x the 14-unit labels), is the one walked
    page.wait_for_function("() => (document.querySelector('#graph svg g.node text') || {})"
                           ".getAttribute?.('font-size') === '42.00'")
    node, _ = tab_into_graph(page)
    above = press(page, "ArrowUp")
    assert above in takes[node]
    assert_in_view(page, above)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=2')")
    assert "Step 2 of" in page.text_content(".presenter-where")
    page.keyboard.press("Escape")
    page.wait_for_selector("#presenter", state="hidden")
