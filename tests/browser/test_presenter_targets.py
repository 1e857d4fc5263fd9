"""Presenter mode shows what each step points at (issue 35): every `Show:` target of every
scenario (a parameter, a node, a source line, a diagnostic, a heat map) is on a projector's
screen, at 1920 x 1080 and at 1280 x 720, while its step is; and the variant changes without
leaving presenter mode."""

from __future__ import annotations

import re

import pytest

from app.catalog import load_catalog
from tests.conftest import SCENARIOS

from .conftest import api_trace, box, inside, open_scenario, screen, settled

pytestmark = pytest.mark.browser

CATALOG = load_catalog(SCENARIOS)
# every scenario whose steps point at something, as it opens; and weight_dropout's `fixed`
# variant, the one whose raw weight has the gradient (and so the heat map) its step names
SCENARIOS_SHOWN = [(name, "") for name, s in CATALOG.items()
                   if any(step["show"] for step in s.steps)]
SCENARIOS_SHOWN.append(("weight_dropout", "variant=fixed"))
PROJECTORS = [(1920, 1080), (1280, 720)]


def on_screen(page, selector: str, within: str | None = None) -> dict:
    """The first element matching `selector`: shown (not display:none, not of zero size) and
    inside the viewport; and, given `within`, its centre inside that box (a node's label may be
    wider than a 1280 px projector's graph column)."""
    el = page.locator(selector).first
    assert el.count() and el.is_visible(), f"{selector} is not shown"
    drawn = box(page, selector)
    assert drawn["width"] > 0 and drawn["height"] > 0, f"{selector} has no size: {drawn}"
    assert inside(drawn, screen(page)), f"{selector} is off the screen: {drawn}"
    if within:
        centre = {"x": drawn["x"] + drawn["width"] / 2, "y": drawn["y"] + drawn["height"] / 2}
        centre.update(right=centre["x"], bottom=centre["y"])
        assert inside(centre, box(page, within)), f"{selector} is outside {within}: {drawn}"
    return drawn


def missing(page, kind: str, name: str) -> None:
    """The sentence presenter mode says for a target this run lacks, on screen."""
    on_screen(page, f".presenter-missing li[data-kind={kind}][data-name='{name}']")


@pytest.mark.parametrize("size", PROJECTORS, ids=["1920x1080", "1280x720"])
@pytest.mark.parametrize("name,query", SCENARIOS_SHOWN,
                         ids=[f"{n}{'-' + q if q else ''}" for n, q in SCENARIOS_SHOWN])
def test_every_show_target_is_on_the_projector(watched, name, query, size):
    page = watched.page
    page.set_viewport_size({"width": size[0], "height": size[1]})
    steps = CATALOG[name].steps
    doc = api_trace(watched, name, query)
    event = next(e for e in doc["events"] if e["kind"] == "backward")
    codes = {d["code"] for d in doc["diagnostics"]}
    open_scenario(watched, name, "&".join(filter(None, [query, "present=1"])))
    page.wait_for_selector("#presenter", state="visible")
    for n, step in enumerate(steps, 1):
        if n > 1:
            page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.search.includes('say={n}')")
        page.wait_for_function("t => document.querySelector('.presenter-where').textContent"
                               ".startsWith(t)", arg=f"Step {n} of {len(steps)}")
        settled(page)
        watched.shot(f"step{n}", full_page=False)  # before the checks: a failure's picture too
        for item in step["show"]:
            (kind, value), = item.items()
            if kind in ("param", "heatmap"):
                if value not in doc["params"]:
                    missing(page, kind, value)
                    continue
                # its name over the bars (or the heat map) beside the graph, and its node
                on_screen(page, f"#details .param-view[data-param='{value}'] .param-name")
                if any(x.get("param") == value for x in event["graph"]["nodes"]):
                    on_screen(page, "#graph g.node.is-selected", within="#graph")
                if kind == "heatmap":
                    grad = (event.get("grads") or {}).get(value, {}).get("after")
                    if grad:
                        on_screen(page, "#details .heatmaps .heatmap canvas")
                    else:
                        missing(page, kind, value)
            elif kind == "node":
                drawn = on_screen(page, "#graph g.node.is-selected", within="#graph")
                assert value in page.text_content("#graph g.node.is-selected"), (value, drawn)
            elif kind == "line":
                on_screen(page, ".presenter-source .is-target")
                said = page.text_content(".presenter-source .is-target code")
                if isinstance(value, int):
                    assert page.get_attribute(".presenter-source .is-target", "data-line") == \
                        str(value)
                else:
                    assert value.strip() in said, (value, said)
            elif kind == "diagnostic":
                if value in codes:
                    on_screen(page, f".presenter-diagnostics[data-code={value}] li")
                else:
                    missing(page, kind, value)
            else:
                raise AssertionError(f"a Show kind this test does not know: {item}")
        # the step's text and where it is stay on the screen with its targets
        on_screen(page, ".presenter-where")


def test_the_variant_changes_in_presenter_mode(watched):
    """V (and Shift+V) and the presenter's variant buttons change the run in presenter mode,
    which stays on, at the same step, with that step's targets in the new run."""
    page = watched.page
    page.set_viewport_size({"width": 1280, "height": 720})
    open_scenario(watched, "weight_dropout", "present=1")
    page.wait_for_selector(".presenter-variants button[aria-pressed=true][data-variant=data]")
    for n in (2, 3):  # the question, the answer, then what to look at: its heat map
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.search.includes('say={n}')")
    # the data variant: the raw weight has no gradient, so no heat map, and presenter says so
    page.wait_for_selector(".presenter-missing li[data-kind=heatmap]")
    page.keyboard.press("v")
    page.wait_for_url(re.compile(r".*variant=fixed.*"))
    page.wait_for_selector("#progress", state="hidden")
    page.wait_for_selector(".presenter-variants button[aria-pressed=true][data-variant=fixed]")
    assert page.is_visible("#presenter") and "Step 3 of 4" in page.text_content(".presenter-where")
    page.wait_for_selector("#details .heatmaps .heatmap canvas")
    on_screen(page, "#details .heatmaps .heatmap canvas")
    assert page.is_checked("input[name=variant][value=fixed]")  # the form agrees
    watched.shot("fixed", full_page=False)
    page.keyboard.press("Shift+V")
    page.wait_for_url(re.compile(r".*variant=data.*"))
    page.wait_for_selector(".presenter-variants button[aria-pressed=true][data-variant=data]")
    page.click(".presenter-variants button[data-variant=by_hand]")
    page.wait_for_url(re.compile(r".*variant=by_hand.*"))
    page.wait_for_selector("#progress", state="hidden")
    assert page.is_visible("#presenter") and "Step 3 of 4" in page.text_content(".presenter-where")
    # the button keeps the focus: the keys still walk the narration
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=4')")
    assert "variant=by_hand" in page.url
