"""Presenter mode: the scenario's paragraphs one at a time in large type, each highlighting what
its `Show:` line names, then the backward replay, all from the keyboard."""

from __future__ import annotations

import httpx
import pytest

from app.catalog import load_catalog
from tests.conftest import SCENARIOS

from .conftest import api_trace, box, inside, label_px, open_scenario, screen, settled

pytestmark = pytest.mark.browser


def test_arrows_walk_the_scenario_then_the_replay(watched):
    page = watched.page
    steps = load_catalog(SCENARIOS)["reused_layer"].steps
    open_scenario(watched, "reused_layer")
    assert page.is_hidden("#presenter")
    page.keyboard.press("p")
    page.wait_for_selector("#presenter", state="visible")
    # only the graph and the text: the side panels, controls and source are gone
    for hidden in (".col-panel", ".col-story", ".controls", "header.top"):
        assert page.is_hidden(hidden), hidden
    assert page.text_content(".presenter-text").startswith("Question:")
    assert "Step 1 of 3" in page.text_content(".presenter-where")
    font = page.eval_on_selector(".presenter-text p",
                                 "p => parseFloat(getComputedStyle(p).fontSize)")
    assert font >= 28  # readable from the back of a room
    watched.shot("step1")

    page.keyboard.press("ArrowRight")  # the answer: Show: node MseLossBackward0
    page.wait_for_selector("#graph svg g.node.is-selected")
    assert steps[1]["show"] == [{"node": "MseLossBackward0"}]
    assert "MseLossBackward0" in page.text_content("#graph svg g.node.is-selected")
    assert "say=2" in page.url

    page.keyboard.press("ArrowRight")  # what to look at: the reused weight and its line
    page.wait_for_function("() => location.search.includes('param=middle_linear.weight')")
    selected = page.text_content("#graph svg g.node.is-selected")
    assert "middle_linear.weight" in selected
    lines = page.eval_on_selector_all("#graph svg g.node.is-line", "gs => gs.length")
    assert lines >= 1  # the nodes `self.middle_linear(h)` made are outlined
    watched.shot("step3")

    page.keyboard.press("ArrowRight")  # past the last paragraph: the replay begins
    page.wait_for_selector("#graph svg g.node.is-current")
    assert "Replay: step 1 of" in page.text_content(".presenter-where")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")  # out of the replay, back to the text
    page.wait_for_function("() => !document.querySelector('#graph svg g.node.is-current')")
    assert "Step 3 of 3" in page.text_content(".presenter-where")
    page.keyboard.press("Escape")
    page.wait_for_selector("#presenter", state="hidden")
    assert page.is_visible(".col-panel")
    assert "present=" not in page.url


def test_present_1_and_the_button_start_at_the_same_step(watched):
    page = watched.page
    open_scenario(watched, "reused_layer")
    page.click("#present-toggle")
    page.wait_for_selector("#presenter", state="visible")
    by_button = (page.text_content(".presenter-where"), page.text_content(".presenter-text"))
    assert by_button[0] == "Step 1 of 3" and "say=1" in page.url
    open_scenario(watched, "reused_layer", "present=1")
    page.wait_for_selector("#presenter", state="visible")
    assert (page.text_content(".presenter-where"), page.text_content(".presenter-text")) == \
        by_button
    page.wait_for_function("() => location.search.includes('say=1')")


# the projector's sizes and the label size each must reach (issue 21)
PROJECTORS = [((1920, 1080), 24), ((1280, 720), 18)]


def presenter_drawing(page) -> float:
    """The type the graph is drawn in (graphviz's own font size, in the drawing's units)."""
    return float(page.get_attribute("#graph svg g.node text[font-size]", "font-size"))


@pytest.mark.parametrize("size,least", PROJECTORS, ids=["1920x1080", "1280x720"])
def test_the_projector_gets_large_labels_and_the_bars(watched, size, least):
    """Presenter mode on a projector: the graph drawn in larger type (not only zoomed), labels
    of at least 24 px at 1920 x 1080 and 18 px at 1280 x 720, the graph within the screen with
    the step's part of it in view, and a step that names a parameter shows its bars beside it."""
    page = watched.page
    page.set_viewport_size({"width": size[0], "height": size[1]})
    open_scenario(watched, "reused_layer")
    scenario_type = presenter_drawing(page)
    page.click("#present-toggle")
    page.wait_for_function(f"() => parseFloat(document.querySelector("
                           f"'#graph svg g.node text[font-size]').getAttribute('font-size'))"
                           f" > {scenario_type}")
    projector_type = presenter_drawing(page)
    assert projector_type >= 3 * 14  # the server drew it for the room: 3 x the 1x type
    # the same drawing straight from the API (cached like any other)
    svg = httpx.get(f"{watched.base}/api/scenarios/reused_layer/graph.svg?k=3&font=3",
                    timeout=60).text
    assert 'font-size="42.00"' in svg
    event = next(e for e in api_trace(watched, "reused_layer", "k=3")["events"]
                 if e["kind"] == "backward")
    param = "middle_linear.weight"
    weight = next(n["id"] for n in event["graph"]["nodes"] if n.get("param") == param)
    uses = [c["node"] for c in event["contributions"][param]]
    first = screen(page)

    def check(step: int, focus: list[str]) -> None:
        settled(page)
        assert f"Step {step} of 3" in page.text_content(".presenter-where")
        graph = box(page, "#graph")
        assert inside(graph, first), f"step {step}: the graph runs past the screen: {graph}"
        for node in focus:
            drawn = box(page, f"#graph g.node#{node}")
            assert inside(drawn, graph), f"step {step}: {node} is out of view: {drawn}"
        labels = label_px(page)
        assert labels >= least, f"step {step}: labels are {labels:.1f} px"
        watched.shot(f"step{step}", full_page=False)

    check(1, [weight, "out0"] if size[1] >= 1080 else [weight])  # the scenario's target
    assert page.is_hidden(".col-panel")  # nothing named yet: the graph and the text only
    page.keyboard.press("ArrowRight")  # the answer: Show: node MseLossBackward0, and its edges
    page.wait_for_selector("#graph svg g.node.is-selected")
    check(2, ["n0", "out0"])
    page.keyboard.press("ArrowRight")  # what to look at: Show: param middle_linear.weight
    page.wait_for_function("() => location.search.includes('say=3')")
    page.wait_for_selector(".col-panel .waterfall")
    check(3, [weight, *uses])
    # its bars beside the graph, large, on the screen: one per use and .grad
    assert page.locator("#details .acc-bar.use").count() == len(uses) == 3
    chart = box(page, "#details .waterfall")
    graph = box(page, "#graph")
    assert chart["x"] >= graph["right"], "the bars are not beside the graph"
    assert inside(box(page, "#details .acc-bar.total"), first), "the .grad bar is off screen"
    assert chart["width"] >= 400
    value = page.eval_on_selector("#details .acc-bar.total .acc-value", "t => {"
                                  " const m = t.getScreenCTM();"
                                  " return parseFloat(getComputedStyle(t).fontSize) * m.a; }")
    assert value >= least, f"the bars' numbers are {value:.1f} px"
