"""Presenter mode: the lesson's paragraphs one at a time in large type, each highlighting what
its `Show:` line names, then the backward replay, all from the keyboard."""

from __future__ import annotations

import pytest

from app.catalog import load_catalog
from tests.conftest import SCENARIOS

from .conftest import open_scenario

pytestmark = pytest.mark.browser


def test_arrows_walk_the_lesson_then_the_replay(watched):
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
