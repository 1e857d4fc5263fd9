"""The answer on the first screen (issue 35): each presenter step opens the graph with every
node it names whole inside the graph's visible box, at a projector's 1280 x 720 and 1920 x 1080;
no badge lies over (or under) a node; a direct `?present=1&say=N` link lands as stepping there
does; the presenter lists a lesson's variants in its file's order.

What a step names is worked out here from the scenario's file and the Trace the API serves
(its `Show:` lines: a parameter and the nodes its uses came in at, a node by name, a source
line's nodes), never read back from the page; positions are measured on screen.
"""

from __future__ import annotations

import ast
import re
from urllib.parse import parse_qs, urlparse

import pytest

from app.catalog import load_catalog
from tests.conftest import SCENARIOS

from .conftest import api_trace, label_px, open_scenario, settled, watched_at

pytestmark = pytest.mark.browser

SIZES = [(1280, 720), (1920, 1080)]
# every lesson in its first variant, and checkpointing's `reentrant`, whose step 3 names the
# checkpoint's line and has a node on it (CheckpointFunctionBackward)
LESSONS = [(name, None) for name in load_catalog(SCENARIOS)] + [("checkpointing", "reentrant")]

# boxes on screen: every node's outline, every badge, the graph area less what the window cuts
# (a phone in presenter mode too: the step's text is a strip above the graph, presenter.js
# compact, so the graph and what the step names are on the first screen)
_MEASURE = """(scrolls) => {
  const edges = (b) => ({x0: b.left, y0: b.top, x1: b.right, y1: b.bottom});
  const area = document.getElementById('graph').getBoundingClientRect();
  const seen = scrolls ? edges(area) : {x0: Math.max(area.left, 0), y0: Math.max(area.top, 0),
    x1: Math.min(area.right, innerWidth), y1: Math.min(area.bottom, innerHeight)};
  const nodes = {};
  for (const g of document.querySelectorAll('#graph svg g.node')) {
    const shape = g.querySelector('path, polygon, ellipse') || g;
    nodes[g.id] = edges(shape.getBoundingClientRect());
  }
  const badges = [...document.querySelectorAll('#graph svg g.badge')].map((b) => {
    const box = edges(b.getBoundingClientRect());
    const x = (box.x0 + box.x1) / 2, y = (box.y0 + box.y1) / 2;
    const hit = document.elementFromPoint(x, y);
    // a badge names its node (one drawn inside its node's <g> is that node's)
    const graph = document.getElementById('graph');
    return {node: b.dataset.node || b.closest('g.node')?.id, cls: b.getAttribute('class'), box,
      onTop: !hit || !graph.contains(hit) || Boolean(hit.closest('g.badge'))};
  });
  const selected = document.querySelector('#graph svg g.node.is-selected');
  return {seen, nodes, badges, selected: selected ? selected.id : null};
}"""


def backward_event(trace: dict) -> dict | None:
    """The event the page draws first: the first backward pass."""
    return next((e for e in trace["events"] if e["kind"] == "backward"), None)


def named_nodes(step: dict, event: dict, script: list[str]) -> set[str]:
    """The node ids a step's `Show:` items name in this event's graph."""
    nodes = event["graph"]["nodes"]
    ids: set[str] = set()
    for item in step["show"]:
        param = item.get("param") or item.get("heatmap")
        if param:
            ids |= {n["id"] for n in nodes if n.get("param") == param}
            if any(n.get("param") == param for n in nodes):
                ids |= {c["node"] for c in (event.get("contributions") or {}).get(param, [])}
        elif item.get("node"):
            ids |= {n["id"] for n in nodes if n["name"] == item["node"]}
        elif "line" in item:
            text = item["line"]
            lines = [text] if isinstance(text, int) else \
                [i for i, line in enumerate(script, 1)
                 if text in line and not line.strip().startswith("Show:")]
            with_nodes = [n for n in lines if any(x.get("line") == n for x in nodes)]
            if with_nodes:
                ids |= {x["id"] for x in nodes if x.get("line") == with_nodes[0]}
    return ids


def inside(box: dict, seen: dict, slack: float = 1.0) -> bool:
    return (box["x0"] >= seen["x0"] - slack and box["y0"] >= seen["y0"] - slack
            and box["x1"] <= seen["x1"] + slack and box["y1"] <= seen["y1"] + slack)


def overlap(a: dict, b: dict) -> float:
    w = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
    h = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
    return max(0.0, w) * max(0.0, h)


def check_badges(measured: dict, where: str) -> None:
    for badge in measured["badges"]:
        for node_id, box in measured["nodes"].items():
            if node_id == badge["node"]:
                continue  # on its own node's corner, drawn over it
            assert overlap(badge["box"], box) < 1.0, \
                f"{where}: the {badge['cls']} of {badge['node']} lies over node {node_id}"
        assert badge["onTop"], f"{where}: the {badge['cls']} of {badge['node']} is under something"


def step_query(url: str) -> dict:
    q = parse_qs(urlparse(url).query)
    return {k: q.get(k) for k in ("node", "param", "line", "say", "variant")}


def walk(page, count: int):
    """Yield (n, measured, url) for each presenter step, reached with → from step 1."""
    for n in range(1, count + 1):
        if n > 1:
            page.keyboard.press("ArrowRight")
        page.wait_for_function("n => document.querySelector('.presenter-where').textContent"
                               ".startsWith(`Step ${n} of`)", arg=n)
        page.wait_for_selector("#progress", state="hidden")
        settled(page)
        yield n, page.evaluate(_MEASURE, False), page.url


@pytest.mark.parametrize("name,variant", LESSONS, ids=[f"{n}-{v or 'first'}" for n, v in LESSONS])
def test_each_step_opens_with_what_it_names_whole(watched, name, variant):
    check_steps(watched, name, variant, SIZES)


# the lessons whose steps name nodes (a parameter, a node, a line), at a laptop's 1366 x 768 and
# a phone's 390 x 844
NAMING = [("reused_layer", None), ("stop_gradient", None), ("mixed_precision", None),
          ("masked_gradient", None), ("checkpointing", "reentrant")]
SMALL = [(1366, 768), (390, 844)]


@pytest.mark.parametrize("name,variant", NAMING, ids=[f"{n}-{v or 'first'}" for n, v in NAMING])
def test_each_step_on_a_laptop_and_a_phone(watched, name, variant):
    check_steps(watched, name, variant, SMALL)


def check_steps(watched, name, variant, sizes) -> None:
    page = watched.page
    scenario = load_catalog(SCENARIOS)[name]
    query = f"variant={variant}" if variant else ""
    event = backward_event(api_trace(watched, name, query))
    if event is None:
        pytest.skip(f"{name} records no backward pass in this variant")
    script = (SCENARIOS / f"{name}.py").read_text().splitlines()
    named = [named_nodes(step, event, script) for step in scenario.steps]
    for width, height in sizes:
        page.set_viewport_size({"width": width, "height": height})
        open_scenario(watched, name, "&".join(filter(None, [query, "present=1"])))
        for n, measured, _url in walk(page, len(scenario.steps)):
            where = f"{name} {variant or ''} step {n} at {width}x{height}"
            for node_id in sorted(named[n - 1]):
                assert node_id in measured["nodes"], f"{where}: {node_id} is not drawn"
                drawn, seen = measured["nodes"][node_id], measured["seen"]
                assert inside(drawn, seen), f"{where}: {node_id} at {drawn} is not whole in {seen}"
                for badge in measured["badges"]:
                    if badge["node"] == node_id:
                        assert inside(badge["box"], seen), f"{where}: {node_id}'s badge is cut"
            check_badges(measured, where)
            if name == "checkpointing" and n == 3 and width == 1280:
                watched.shot(f"{variant or 'first'}-step3-1280x720", full_page=False)


# the lessons whose steps select something: a node, a parameter (and its heat map), a line
DIRECT = ["reused_layer", "masked_gradient", "custom_function", "stop_gradient"]


@pytest.mark.parametrize("name", DIRECT)
def test_a_direct_say_link_lands_as_stepping_there(watched, name):
    page = watched.page
    steps = load_catalog(SCENARIOS)[name].steps
    open_scenario(watched, name, "present=1")
    stepped = {n: (measured["selected"], step_query(url))
               for n, measured, url in walk(page, len(steps))}
    assert any(sel for sel, _ in stepped.values()), f"no step of {name} selects a node"
    for n in range(1, len(steps) + 1):
        open_scenario(watched, name, f"present=1&say={n}")
        settled(page)
        measured = page.evaluate(_MEASURE, False)
        assert (measured["selected"], step_query(page.url)) == stepped[n], f"{name} say={n}"


def file_variants(name: str) -> list[str]:
    """The VARIANTS dict's keys in the order the scenario's file writes them."""
    tree = ast.parse((SCENARIOS / f"{name}.py").read_text())
    for stmt in tree.body:
        names = [getattr(t, "id", None) for t in getattr(stmt, "targets", [])]
        if isinstance(stmt, ast.Assign) and "VARIANTS" in names:
            return [ast.literal_eval(k) for k in stmt.value.keys]
    return []


@pytest.mark.parametrize("name", ["checkpointing", "stop_gradient"])
def test_presenter_lists_variants_in_the_files_order(watched, name):
    page = watched.page
    order = file_variants(name)
    assert order != sorted(order), "pick a scenario whose variants are not in alphabetical order"
    open_scenario(watched, name, "present=1")
    page.wait_for_selector(".presenter-variants button")
    shown = page.eval_on_selector_all(".presenter-variants button",
                                      "bs => bs.map(b => b.dataset.variant)")
    assert shown == order
    form = page.eval_on_selector_all("input[name=variant]", "xs => xs.map(x => x.value)")
    assert form == order
    # V walks them in that order too
    page.keyboard.press("v")
    page.wait_for_url(re.compile(rf".*variant={order[1]}\b.*"))


# a parameter picked by a link on the plain page: it and the nodes its uses came in at (each
# with its number badge) open whole in the part of the graph that is seen, at every size
PICKED = [("reused_layer", "param=middle_linear.weight"),
          ("stop_gradient", "variant=both_uses&param=linear.weight")]
PAGE_SIZES = [(1280, 720), (1366, 768), (1920, 1080), (390, 844)]


@pytest.mark.parametrize("size", PAGE_SIZES, ids=[f"{w}x{h}" for w, h in PAGE_SIZES])
@pytest.mark.parametrize("name,query", PICKED, ids=[p[0] for p in PICKED])
def test_a_picked_parameter_opens_whole_with_its_use_badges(browser, server, request, name, query,
                                                             size):
    phone = size[0] <= 600
    with watched_at(browser, server, size, request.node.name.replace("test_", "", 1)) as w:
        page = w.page
        param = parse_qs(query)["param"][0]
        event = backward_event(api_trace(w, name, query.split("&param")[0] if "&" in query else ""))
        weight = next(n["id"] for n in event["graph"]["nodes"] if n.get("param") == param)
        uses = {c["node"] for c in event["contributions"][param]}
        assert len(uses) >= 2, f"{name}: pick a parameter used more than once"
        open_scenario(w, name, query)
        page.wait_for_selector("#graph .use-badge")
        page.wait_for_timeout(300)  # a phone scrolls the graph into view on the next frame
        settled(page)
        measured = page.evaluate(_MEASURE, False)
        seen = dict(measured["seen"])
        if phone and page.evaluate("() => document.body.classList.contains('sheet-open')"):
            sheet = page.evaluate("() => document.querySelector('#details')"
                                  ".getBoundingClientRect().top")
            seen["y1"] = min(seen["y1"], sheet)
        where = f"{name} {param} at {size[0]}x{size[1]}"
        for node_id in {weight, *uses}:
            assert inside(measured["nodes"][node_id], seen), \
                f"{where}: {node_id} at {measured['nodes'][node_id]} is not whole in {seen}"
        numbered = [b for b in measured["badges"] if "use-badge" in b["cls"]]
        assert {b["node"] for b in numbered} == uses
        for badge in numbered:
            assert inside(badge["box"], seen), f"{where}: the use badge of {badge['node']} is cut"
        check_badges(measured, where)
        w.shot("opening", full_page=False)


def test_a_smaller_window_opens_the_view_again_until_the_graph_is_moved(watched):
    """A window made smaller (a laptop's browser un-maximised, a projector's window) opens the
    graph's view again at the new size: the picked parameter and its uses stay whole in view;
    once the person has panned the graph, a resize keeps their view."""
    page = watched.page
    name, query = PICKED[0]
    param = parse_qs(query)["param"][0]
    event = backward_event(api_trace(watched, name))
    ids = {n["id"] for n in event["graph"]["nodes"] if n.get("param") == param}
    ids |= {c["node"] for c in event["contributions"][param]}
    page.set_viewport_size({"width": 1920, "height": 1080})
    open_scenario(watched, name, query)
    page.wait_for_selector("#graph .use-badge")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.wait_for_timeout(400)  # the page redraws 150 ms after the last resize event
    settled(page)
    measured = page.evaluate(_MEASURE, False)
    for node_id in ids:
        drawn, seen = measured["nodes"][node_id], measured["seen"]
        assert inside(drawn, seen), f"after the resize {node_id} at {drawn} is not whole in {seen}"
    check_badges(measured, "after the resize")
    watched.shot("resized-1280x720", full_page=False)
    # the person drags the graph: their view survives the next resize
    graph = page.locator("#graph").bounding_box()
    x, y = graph["x"] + 40, graph["y"] + graph["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 150, y + 60, steps=5)
    page.mouse.up()
    settled(page)
    dragged = page.evaluate("() => document.querySelector('#graph .svg-pan-zoom_viewport')"
                            ".getAttribute('transform')")
    page.set_viewport_size({"width": 1280, "height": 700})
    page.wait_for_timeout(400)
    settled(page)
    after = page.evaluate("() => document.querySelector('#graph .svg-pan-zoom_viewport')"
                          ".getAttribute('transform')")
    assert after == dragged


@pytest.mark.parametrize("say", ["-5", "0", "99", "99999999999999999999"])
def test_a_say_link_past_the_steps_lands_on_a_step_there_is(watched, say):
    """Attack round 2: `say=N` comes from whoever wrote the link. Past the scenario's steps (or
    before the first), the presenter shows the nearest step there is and says so, never "Step
    -5 of 7", and → goes on from there (it was stuck before the first step)."""
    name = "reused_layer"
    total = len(load_catalog(SCENARIOS)[name].steps)
    page = watched.page
    open_scenario(watched, name, f"present=1&say={say}")
    near = 1 if int(say) < 1 else total
    where = page.locator("#presenter .presenter-where")
    assert where.inner_text().startswith(f"Step {near} of {total}"), where.inner_text()
    if near < total:
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.search.includes('say={near + 1}')")


def side_cut(measured: dict) -> list[str]:
    """The nodes the graph area's left or right side cuts, among the rows it shows."""
    seen = measured["seen"]
    return sorted(node_id for node_id, b in measured["nodes"].items()
                  if b["y1"] > seen["y0"] and b["y0"] < seen["y1"]
                  and b["x1"] > seen["x0"] and b["x0"] < seen["x1"]
                  and (b["x0"] < seen["x0"] - 1 or b["x1"] > seen["x1"] + 1))


def test_the_reentrant_checkpoint_s_line_opens_with_no_node_cut_at_its_sides(watched):
    """checkpointing's reentrant variant, step 3 at 1280 x 720: the rows around the
    checkpoint's line are wider than the graph area at the projector's labels, and the view
    cut two parameters at its left side. The step's column gives the graph the width (the
    step has no bars beside it): no node cut at the sides, labels still at least 18 px, and the
    step's text no smaller than the labels' floor there (18.5 px: trace_page.js widen)."""
    page = watched.page
    page.set_viewport_size({"width": 1280, "height": 720})
    open_scenario(watched, "checkpointing", "variant=reentrant&present=1&say=3")
    page.wait_for_function("() => document.querySelector('.presenter-where').textContent"
                           ".startsWith('Step 3 of')")
    page.wait_for_timeout(300)
    settled(page)
    measured = page.evaluate(_MEASURE, False)
    assert side_cut(measured) == [], side_cut(measured)
    labels = label_px(page)
    assert labels >= 18, f"labels are {labels:.1f} px"
    text = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector("
                         "'#presenter .presenter-text > p')).fontSize) * parseFloat("
                         "getComputedStyle(document.body).getPropertyValue('--present-fit')"
                         " || '1')")
    assert text >= 18.5, f"the step's text is {text:.1f} px"
    assert page.evaluate("() => document.documentElement.scrollHeight <= innerHeight + 1")
    watched.shot("reentrant-step3-1280x720", full_page=False)
