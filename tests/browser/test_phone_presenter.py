"""A phone in presenter mode (issue 35): a student following a teacher's presenter on a 390 x
844 phone, or anyone opening a `present=1` link there, sees the step's text as a strip of a few
lines and, below it on the same first screen, the graph with every node the step names whole;
"More" opens the whole step and "Less" folds it again.

What a step names is worked out from the scenario's file and the Trace the API serves
(test_first_screen.named_nodes), never read back from the page; positions are measured on
screen."""

from __future__ import annotations

import re

import pytest

from app.catalog import load_catalog
from tests.conftest import SCENARIOS

from .axe import audit, said, serious
from .conftest import Watched, api_trace, box, open_scenario, screen, settled, watched_at
from .conftest import inside as on_screen
from .test_class import followers, join, room, start_class  # noqa: F401 (room: a fixture)
from .test_first_screen import backward_event, inside, named_nodes

pytestmark = pytest.mark.browser

PHONE = (390, 844)
SCENARIO = "reused_layer"

# the nodes' boxes and the part of the graph a phone shows: the graph area within the window
_SEEN = """() => {
  const edges = (b) => ({x0: b.left, y0: b.top, x1: b.right, y1: b.bottom});
  const area = document.getElementById('graph').getBoundingClientRect();
  const seen = {x0: Math.max(area.left, 0), y0: Math.max(area.top, 0),
    x1: Math.min(area.right, innerWidth), y1: Math.min(area.bottom, innerHeight)};
  const nodes = {};
  for (const g of document.querySelectorAll('#graph svg g.node')) {
    nodes[g.id] = edges((g.querySelector('path, polygon, ellipse') || g).getBoundingClientRect());
  }
  return {seen, nodes};
}"""


def named(w: Watched, name: str) -> list[set[str]]:
    event = backward_event(api_trace(w, name))
    script = (SCENARIOS / f"{name}.py").read_text().splitlines()
    return [named_nodes(step, event, script) for step in load_catalog(SCENARIOS)[name].steps]


def check_step(w: Watched, n: int, ids: set[str]) -> dict:
    page = w.page
    page.wait_for_function("n => document.querySelector('.presenter-where').textContent"
                           ".startsWith(`Step ${n} of`)", arg=n)
    page.wait_for_selector("#progress", state="hidden")
    page.wait_for_timeout(300)  # the opening view is set on the next frame
    settled(page)
    window = screen(page)
    # the step's text starts on the screen, and its place and buttons are there too
    assert on_screen(box(page, "#presenter .presenter-bar"), window), f"step {n}: the bar is off"
    measured = page.evaluate(_SEEN)
    seen = measured["seen"]
    assert seen["y1"] - seen["y0"] >= 0.5 * window["height"], \
        f"step {n}: the graph has {seen['y1'] - seen['y0']:.0f} px of the screen"
    for node_id in sorted(ids):
        drawn = measured["nodes"][node_id]
        assert inside(drawn, seen), f"step {n}: {node_id} at {drawn} is not whole in {seen}"
    return measured


def test_a_phone_following_a_presenter_sees_the_graph_under_a_strip_of_text(room):  # noqa: F811
    teacher, _relay, new_student = room
    code = start_class(teacher, SCENARIO)
    student = new_student(phone=True)
    join(student, code, SCENARIO)
    followers(teacher, 1)
    steps = named(teacher, SCENARIO)
    assert any(steps), "pick a lesson whose steps name nodes"
    teacher.page.wait_for_selector("#progress", state="hidden")
    teacher.page.click("#present-toggle")
    for n in range(1, len(steps) + 1):
        if n > 1:
            teacher.page.keyboard.press("ArrowRight")
        student.page.wait_for_url(re.compile(rf".*present=1.*say={n}\b.*"))
        check_step(student, n, steps[n - 1])
        student.shot(f"step{n}", full_page=False)


def test_more_opens_the_whole_step_and_less_folds_it(browser, server):
    # bypass_csp: for axe
    with watched_at(browser, server, PHONE, "phone-presenter-more", bypass_csp=True) as w:
        page = w.page
        steps = named(w, SCENARIO)
        last = len(steps)
        open_scenario(w, SCENARIO, f"present=1&say={last}")
        check_step(w, last, steps[last - 1])
        text = page.locator("#presenter .presenter-text > p").first
        folded = text.bounding_box()["height"]
        whole = page.evaluate("() => document.querySelector('#presenter .presenter-text > p')"
                              ".scrollHeight")
        assert whole > folded + 10, "pick a step longer than the strip"
        more = page.locator("#presenter .presenter-more")
        assert more.inner_text().startswith("More")
        found = serious(audit(page))
        assert not found, said(found)
        more.click()
        page.wait_for_function("() => document.querySelector('#presenter .presenter-more')"
                               ".getAttribute('aria-expanded') === 'true'")
        assert text.bounding_box()["height"] >= whole - 1  # the whole paragraph
        # the step's source lines around its own, which the strip left out
        assert page.locator("#presenter .presenter-line").count() > 1
        assert all(page.locator("#presenter .presenter-line").nth(i).is_visible()
                   for i in range(page.locator("#presenter .presenter-line").count()))
        w.shot("opened", full_page=False)
        more.click()
        page.wait_for_function("() => document.querySelector('#presenter .presenter-more')"
                               ".getAttribute('aria-expanded') === 'false'")
        check_step(w, last, steps[last - 1])  # the graph is back under the strip
