"""The scenario page in a real Chromium: the interactions a teacher relies on."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import httpx
import jsonschema
import pytest

from app.catalog import load_catalog
from app.format import load_schema
from tests.conftest import SCENARIOS

from .conftest import api_trace, box, inside, label_px, open_scenario, screen, settled

pytestmark = pytest.mark.browser


def backward(doc: dict, index: int | None = None) -> dict:
    events = [e for e in doc["events"] if e["kind"] == "backward"]
    return events[0] if index is None else next(e for e in events if e["index"] == index)


def values_sum(summary: dict) -> float:
    def walk(v):
        return sum(walk(x) for x in v) if isinstance(v, list) else float(v)
    return walk(summary["values"])


def test_index_lists_scenarios_and_opens_one(watched):
    page = watched.page
    page.goto(watched.base + "/")
    names = [s["name"] for s in page.request.get(watched.base + "/api/scenarios").json()]
    cards = page.locator("#scenario-cards .card:not(#own-code-card)")
    assert cards.count() == len(names)
    own = page.locator("#own-code-card")
    assert "paste or upload" in own.inner_text()
    watched.shot("index")
    page.click('a[href="/scenarios/reused_layer"]')
    page.wait_for_selector("#graph svg g.node")
    assert page.locator("h1").inner_text().startswith("A layer reused")
    watched.shot("reused_layer")


def test_parameter_bars_sum_to_grad(watched):
    """Click middle_linear.weight in the graph: one bar per use (k = 3), summing to .grad."""
    page = watched.page
    open_scenario(watched, "reused_layer")
    doc = api_trace(watched, "reused_layer", "k=3")
    event = backward(doc)
    node = next(n for n in event["graph"]["nodes"] if n.get("param") == "middle_linear.weight")
    page.click("#zoom-fit")
    page.click(f"#graph g.node#{node['id']}")
    panel = page.locator("#details .param-view")
    assert panel.get_attribute("data-param") == "middle_linear.weight"
    bars = page.locator("#details .acc-bar.use")
    assert bars.count() == 3
    values = [float(bars.nth(i).get_attribute("data-value")) for i in range(3)]
    shown_grad = float(page.locator("#details .acc-bar.total").get_attribute("data-value"))
    assert math.isclose(sum(values), shown_grad, rel_tol=1e-6, abs_tol=1e-9)
    # ... and that is what PyTorch put in .grad (the trace's own record of it)
    grad = values_sum(event["grads"]["middle_linear.weight"]["after"])
    assert math.isclose(shown_grad, grad, rel_tol=1e-6, abs_tol=1e-9)
    assert page.locator("#details .grad-value").inner_text() != ""
    # each bar names the node that sent that use's gradient; those nodes are numbered in the graph
    contrib = [c["node"] for c in event["contributions"]["middle_linear.weight"]]
    assert [bars.nth(i).get_attribute("data-node") for i in range(3)] == contrib
    for i, node_id in enumerate(contrib, start=1):
        badge = page.locator(f"#graph .use-badge[data-node={node_id}] text")
        assert badge.text_content() == str(i)
    assert page.locator("#details .heatmap canvas").count() == 4  # .grad and each use
    watched.shot("bars")
    # one entry: click the top-left cell of the .grad heat map; the bars follow that entry
    page.locator("#details .heatmap canvas").first.click(position={"x": 4, "y": 4})
    assert "cell=0,0" in page.url
    entry = [float(bars.nth(i).get_attribute("data-value")) for i in range(3)]
    after = event["grads"]["middle_linear.weight"]["after"]["values"][0][0]
    total = float(page.locator("#details .acc-bar.total").get_attribute("data-value"))
    assert math.isclose(total, after, rel_tol=1e-6, abs_tol=1e-12)
    assert math.isclose(sum(entry), total, rel_tol=1e-5, abs_tol=1e-9)
    watched.shot("entry")
    # the optimizer step that followed: weights before and after, the change beside .grad
    page.click("#details .next-step button")
    step = page.locator("#details .step-view")
    assert step.locator(".heatmap canvas").count() == 4
    assert "SGD step #1" in step.inner_text()
    # plain SGD: the change is -lr × .grad, so ‖change‖ / ‖.grad‖ is lr, as PyTorch made it
    ratio = step.locator("tr", has_text="‖change‖ / ‖.grad‖").locator("td").inner_text()
    assert ratio.startswith("0.1") and "lr = 0.1" in ratio, ratio
    assert "it is the change PyTorch made" in step.inner_text()
    assert page.locator("#timeline button[aria-pressed=true]").get_attribute("data-event") == "1"
    watched.shot("step")


def test_node_click_shows_details_and_source_line(watched):
    page = watched.page
    open_scenario(watched, "reused_layer")
    event = backward(api_trace(watched, "reused_layer", "k=3"))
    node = next(n for n in event["graph"]["nodes"] if n["kind"] == "op" and n.get("line")
                and n.get("module") == "middle_linear")
    page.click("#zoom-fit")
    page.click(f"#graph g.node#{node['id']}")
    assert page.locator("#details .op-name").inner_text() == node["name"]
    assert "line-selected" in page.locator(f"#L{node['line']}").get_attribute("class")
    assert "is-selected" in page.locator(f"#graph g.node#{node['id']}").get_attribute("class")
    watched.shot("node")
    # the other way: a source line highlights every node it made
    page.click(f"#L{node['line']}")
    made = {n["id"] for n in event["graph"]["nodes"] if n.get("line") == node["line"]}
    lit = set(page.eval_on_selector_all("#graph g.node.is-line", "els => els.map(e => e.id)"))
    assert lit == made
    watched.shot("line")
    # and by keyboard: focus a node, Enter selects it
    other = next(n for n in event["graph"]["nodes"] if n["kind"] == "output")
    page.focus(f"#graph g.node#{other['id']}")
    page.keyboard.press("Enter")
    assert page.locator("#details .op-name").inner_text() == other["name"]


def test_replay_steps_through_every_node_in_order(watched):
    page = watched.page
    open_scenario(watched, "reused_layer")
    order = backward(api_trace(watched, "reused_layer", "k=3"))["order"]
    status = page.locator("#replay-status")
    page.locator("body").focus()
    for i, node_id in enumerate(order, start=1):
        page.keyboard.press("ArrowRight")
        assert status.get_attribute("data-step") == str(i)
        assert status.get_attribute("data-node") == node_id
        assert "is-current" in page.locator(f"#graph g.node#{node_id}").get_attribute("class")
        if i == 5:
            watched.shot("replay-5")
    assert page.locator("#graph g.node.is-pending").count() == 0
    page.keyboard.press("ArrowRight")  # stays at the end
    assert status.get_attribute("data-step") == str(len(order))
    page.keyboard.press("ArrowLeft")
    assert status.get_attribute("data-node") == order[-2]
    page.click("#replay-first")
    assert status.get_attribute("data-step") == "0"
    watched.shot("replay-start")


def test_variant_switch_changes_edges(watched):
    """stop_gradient: with no stopping the weight has two uses; detach cuts one edge into it."""
    page = watched.page

    def edges(kind: str = "grad-edge") -> set[str]:
        return set(page.eval_on_selector_all(f"#graph g.edge.{kind}",
                                             "els => els.map(e => e.id)"))

    open_scenario(watched, "stop_gradient", "variant=both_uses")
    before = edges()
    both = backward(api_trace(watched, "stop_gradient", "variant=both_uses"))
    assert before == {f"e-{e['source']}-{e['target']}-{e['slot']}" for e in both["graph"]["edges"]}
    page.click("#params button[data-param='linear.weight']")
    assert page.locator("#details .acc-bar.use").count() == 2
    watched.shot("both_uses")
    page.click("label.variant-choice:has(input[value=detach])")
    page.wait_for_url("**variant=detach**")
    page.wait_for_selector("#progress", state="hidden")
    page.wait_for_function("() => document.querySelector('#graph svg') !== null")
    after = edges()
    detach = backward(api_trace(watched, "stop_gradient", "variant=detach"))
    assert after == {f"e-{e['source']}-{e['target']}-{e['slot']}" for e in detach["graph"]["edges"]}
    assert after != before
    # the use that detach removed is drawn as a dashed cut where the weight's values were read
    assert edges("cut-edge") == {f"cut-{c['source']}-{c['node']}" for c in detach["graph"]["cuts"]}
    assert len(edges("cut-edge")) == 1
    assert detach["uses"]["linear.weight"] < both["uses"]["linear.weight"]
    # the chosen parameter stays chosen: its bars now show the one use left
    page.wait_for_selector("#details .param-view[data-param='linear.weight']")
    assert page.locator("#details .acc-bar.use").count() == detach["uses"]["linear.weight"] == 1
    watched.shot("detach")


def test_permalink_restores_selection_after_reload(watched):
    page = watched.page
    open_scenario(watched, "reused_layer", "k=2")
    page.click("label.option select[data-option=k]")  # the option control shows the URL's k
    assert page.locator("select[data-option=k]").input_value() == "2"
    page.click("#params button[data-param='middle_linear.weight']")
    page.locator("body").focus()
    for _ in range(4):
        page.keyboard.press("ArrowRight")
    link = page.locator("#permalink").input_value()
    assert "param=middle_linear.weight" in link and "step=4" in link and "k=2" in link
    page.goto(link)
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#details .param-view")
    view = page.locator("#details .param-view")
    assert view.get_attribute("data-param") == "middle_linear.weight"
    assert page.locator("#details .acc-bar.use").count() == 2
    assert page.locator("#replay-status").get_attribute("data-step") == "4"
    assert page.locator("select[data-option=k]").input_value() == "2"
    assert page.url == link
    watched.shot("restored")


def test_exports_download_files_that_parse(watched, tmp_path):
    page = watched.page
    open_scenario(watched, "reused_layer")
    files = {}
    for fmt in ("svg", "png", "dot", "json"):
        with page.expect_download() as info:
            page.click(f"#export-{fmt}")
        path = tmp_path / info.value.suggested_filename
        info.value.save_as(path)
        files[fmt] = path
    assert files["svg"].name == "reused_layer-k3-event0.svg"
    svg = ET.parse(files["svg"]).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert files["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files["dot"].read_text().lstrip().startswith("digraph")
    doc = json.loads(files["json"].read_text())
    jsonschema.validate(doc, load_schema())
    assert "reused_layer" in doc["script"]["name"]


def test_unknown_trace_format_is_refused(watched):
    page = watched.page

    def older(route):
        response = route.fetch()
        doc = response.json()
        doc["format"] = "autograd-lab/trace@0"
        route.fulfill(response=response, json=doc)

    page.route("**/api/scenarios/reused_layer/trace?*", older)
    page.goto(watched.base + "/scenarios/reused_layer")
    status = page.locator("#status")
    status.wait_for(state="visible")
    text = status.inner_text()
    assert "autograd-lab/trace@1" in text and "autograd-lab/trace@0" in text
    assert page.locator("#graph svg").count() == 0
    watched.shot("refused")


def test_unavailable_device_is_a_clear_message(watched):
    page = watched.page
    devices = page.request.get(watched.base + "/api/devices").json()["devices"]
    if "cuda" in devices:
        pytest.skip("this machine has CUDA")
    page.goto(watched.base + "/scenarios/reused_layer?device=cuda")
    status = page.locator("#status")
    status.wait_for(state="visible")
    assert "not available" in status.inner_text()
    assert "device" in status.inner_text()
    assert "not available here" in page.locator("#device-select option[value=cuda]").inner_text()
    watched.shot("no-cuda")


def test_diagnostics_are_shown_where_they_point(watched):
    """WeightDropout through .data: the raw weight gets no gradient; the page says so there."""
    page = watched.page
    open_scenario(watched, "weight_dropout", "variant=data")
    doc = api_trace(watched, "weight_dropout", "variant=data")
    warned = [d for d in doc["diagnostics"] if d["level"] == "warning" and d["params"]]
    assert warned, "the scenario should warn about a parameter"
    name = warned[0]["params"][0]
    items = page.locator("#diagnostics-list li")
    assert items.count() == len(doc["diagnostics"])
    row = page.locator(f"#params button[data-param='{name}']").locator("xpath=..")
    assert row.locator(".badge-warning").count() == 1
    watched.shot("list")
    page.locator("#diagnostics-list li", has_text=name).locator("button.diag-show").click()
    panel = page.locator("#details .param-view")
    assert panel.get_attribute("data-param") == name
    assert "no gradient reaches it" in panel.inner_text()
    assert panel.locator(".diag-inline .badge-warning").count() >= 1
    watched.shot("param")


def test_compare_page_shows_every_variant_side_by_side(watched):
    page = watched.page
    page.goto(watched.base + "/scenarios/stop_gradient/compare")
    cards = page.locator(".compare-card")
    variants = page.request.get(watched.base + "/api/scenarios/stop_gradient").json()["variants"]
    shown = [cards.nth(i).get_attribute("data-variant") for i in range(cards.count())]
    assert shown == list(variants)
    page.wait_for_function("() => [...document.querySelectorAll('.compare-status')].every("
                           "e => /event/.test(e.textContent))")
    page.wait_for_function("() => [...document.querySelectorAll('.compare-graph img')].every("
                           "i => i.complete && i.naturalWidth > 0)")
    # the weight's number of uses is what differs: 2 without stopping, 1 when stopped
    both = cards.locator("xpath=self::*[@data-variant='both_uses']")
    assert both.locator("tr[data-param='linear.weight'] td.uses").inner_text() == "2"
    assert "differs" in both.locator("tr[data-param='linear.weight']").get_attribute("class")
    watched.shot("compare")


def test_api_page_works_offline(watched):
    """/docs is Swagger UI from static/vendor, not a CDN (the fixture fails on other hosts)."""
    page = watched.page
    page.goto(watched.base + "/docs")
    page.get_by_text("/api/scenarios/{name}/trace", exact=True).wait_for()
    watched.shot("docs")


@pytest.mark.parametrize("size", [(1280, 800), (1366, 768)], ids=["1280x800", "1366x768"])
def test_the_first_screen_teaches(watched, size):
    """Issue 21: the scenario's question and what to look at, the node it asks about and the loss,
    all on the first screen, the labels at least 12 px, without scrolling."""
    page = watched.page
    page.set_viewport_size({"width": size[0], "height": size[1]})
    open_scenario(watched, "reused_layer")
    settled(page)
    first = screen(page)
    assert page.evaluate("() => window.scrollY") == 0
    question = box(page, ".narration .para-question")
    look = box(page, ".narration .para-what-to-look-at")
    assert inside(question, first), f"the question is at {question}, below the fold"
    assert inside(look, first), f"what to look at is at {look}, below the fold"
    # the scenario's target: the parameter its Show: lines name (the one it asks you to click)
    steps = load_catalog(SCENARIOS)["reused_layer"].steps
    param = next(item["param"] for step in steps for item in step["show"] if "param" in item)
    event = backward(api_trace(watched, "reused_layer", "k=3"))
    target = next(n["id"] for n in event["graph"]["nodes"] if n.get("param") == param)
    graph = box(page, "#graph")
    assert inside(graph, first), f"the graph runs past the screen: {graph}"
    for name, node in (("target", target), ("loss", "out0")):
        drawn = box(page, f"#graph g.node#{node}")
        assert inside(drawn, graph), f"the {name} {node} is outside the graph's view: {drawn}"
    nodes, edges = label_px(page), label_px(page, "edge")
    assert nodes >= 12, f"node labels are {nodes:.1f} px"
    assert edges >= 10, f"edge labels are {edges:.1f} px"
    # the drawing itself has the larger type; the zoom is not what made the labels readable
    font = float(page.get_attribute("#graph svg g.node text[font-size]", "font-size"))
    assert font >= 28
    watched.shot(f"first-screen-{size[0]}x{size[1]}", full_page=False)


TINY_GRADIENTS = """\
import torch
from torch import nn

torch.manual_seed(0)
layers = []
for _ in range(12):
    layers += [nn.Linear(16, 16), nn.Sigmoid()]
net = nn.Sequential(*layers, nn.Linear(16, 1))
net(torch.randn(8, 16)).pow(2).mean().backward()
"""


def test_numbers_stay_whole_and_the_axis_clears_the_labels(watched):
    """‖.grad‖ never wraps inside a number ("8.732e-" over "8"), and the accumulation chart's
    zero axis never crosses a row's label."""
    page = watched.page
    page.set_viewport_size({"width": 1280, "height": 800})
    run = httpx.post(watched.base + "/api/runs", json={"source": TINY_GRADIENTS},
                     timeout=120).json()
    page.goto(watched.base + run["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    cells = page.eval_on_selector_all(
        "#params td.num:last-child",
        "tds => tds.map(td => [td.textContent, td.getBoundingClientRect().height,"
        " parseFloat(getComputedStyle(td).lineHeight)])")
    assert any("e-" in text for text, _, _ in cells), cells  # the vanishing gradients
    for text, height, line in cells:
        assert height < 1.8 * line, f"{text!r} wraps: {height:.0f} px high"
    watched.shot("gradient-norms", full_page=False)

    open_scenario(watched, "reused_layer", "param=middle_linear.weight")
    page.wait_for_selector("#details .waterfall")
    rect = "els => els.map(e => { const r = e.getBoundingClientRect();" \
        " return [e.textContent, r.left, r.top, r.right, r.bottom]; })"
    labels = page.eval_on_selector_all("#details .waterfall .acc-label", rect)
    axis = page.eval_on_selector_all("#details .waterfall .zero-axis", rect)

    def hit(a, b) -> bool:  # two [text, left, top, right, bottom] boxes overlap
        return a[1] < b[3] + 0.5 and b[1] - 0.5 < a[3] and a[2] < b[4] and b[2] < a[4]

    crossings = [label[0] for label in labels if any(hit(label, line) for line in axis)]
    assert len(labels) == 4  # three uses and .grad
    assert crossings == [], f"the zero axis crosses {crossings}"
    page.locator("#details .waterfall").scroll_into_view_if_needed()
    watched.shot("waterfall", full_page=False)


def test_the_event_menu_and_the_replay_use_different_words(watched):
    """Issue 21: "▲ step #1" (the optimizer's step) stood beside "step ▶" (the replay)."""
    page = watched.page
    open_scenario(watched, "reused_layer")
    assert "step #1" in page.locator("#timeline").inner_text()
    replay = " ".join(page.locator(f"#{i}").inner_text().lower()
                      for i in ("replay-first", "replay-prev", "replay-next", "replay-last"))
    assert "step" not in replay and "next node" in replay
