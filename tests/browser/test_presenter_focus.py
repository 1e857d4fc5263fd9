"""Presenter mode never traps the teacher (issue 35): whatever control the mouse clicked last
(a variant's radio button, a select, a button), P enters presenter mode, → steps the narration and
then the replay (not the next variant), Esc leaves and P comes back, from the keyboard alone."""

from __future__ import annotations

import re

import pytest

from app.catalog import load_catalog
from tests.conftest import SCENARIOS

from .conftest import open_scenario
from .test_class import room, start_class  # noqa: F401

pytestmark = pytest.mark.browser

# every kind of control the scenario page has, clicked with the mouse: (scenario, what, how to
# click it, the variant the click leaves on show). The page's one checkbox is in a teacher's
# class bar: the last test.
CLICKED = [
    ("stop_gradient", "variant radio", "label.variant-choice:has(input[value=detach])", "detach"),
    ("stop_gradient", "device select", "#device-select", "requires_grad"),
    ("reused_layer", "option select", "select[data-option=k]", None),
    ("stop_gradient", "zoom button", "#zoom-in", "requires_grad"),
    ("stop_gradient", "Present button", "#present-toggle", "requires_grad"),
    ("stop_gradient", "presenter next button", "#presenter-next", "requires_grad"),
]


def where(page) -> str:
    return page.text_content(".presenter-where") or ""


def variant_on_show(page) -> str | None:
    """The variant in the address and the one the form has checked; they must agree."""
    in_url = re.search(r"[?&]variant=([a-z_]+)", page.url)
    checked = page.eval_on_selector_all("input[name=variant]:checked", "xs => xs.map(x => x.value)")
    assert (in_url.group(1) if in_url else None) == (checked[0] if checked else None), \
        (page.url, checked)
    return checked[0] if checked else None


def focused(page) -> str:
    return page.evaluate("() => { const e = document.activeElement;"
                         " return e ? e.tagName + (e.type ? ':' + e.type : '') : ''; }")


def click(page, selector: str) -> None:
    """A mouse click, as a teacher makes it. A select's list, open after the click and taking
    the keys, is closed by choosing the option it has, as a second click on it would."""
    page.click(selector)
    if page.eval_on_selector(selector, "e => e.tagName") == "SELECT":
        page.keyboard.press("Enter")


@pytest.mark.parametrize("name,what,selector,variant", CLICKED, ids=[c[1] for c in CLICKED])
def test_keys_work_after_a_click_on_any_control(watched, name, what, selector, variant):
    page = watched.page
    steps = load_catalog(SCENARIOS)[name].steps
    open_scenario(watched, name)
    if selector.startswith("#presenter-"):
        page.keyboard.press("p")  # the presenter's own buttons are there only in presenter mode
        page.wait_for_selector("#presenter", state="visible")
    click(page, selector)
    page.wait_for_selector("#progress", state="hidden")
    page.wait_for_selector("#graph svg g.node")
    if variant:
        page.wait_for_url(re.compile(rf".*variant={variant}.*"))
    on_show = variant_on_show(page)
    assert on_show == variant
    form_control = selector.startswith(("label", "select", "#device"))
    if form_control:
        # the trap the issue found: the clicked control keeps the focus
        assert focused(page).startswith(("INPUT:radio", "SELECT")), focused(page)
        # on the page too, → steps the replay rather than choosing the next option
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => document.querySelector('#replay-status')"
                               ".dataset.step === '1'")
        assert variant_on_show(page) == variant
        page.keyboard.press("Escape")  # the page's Esc: out of the replay again
        page.wait_for_function("() => document.querySelector('#replay-status')"
                               ".dataset.step === ''")

    walk_and_come_back(watched, steps, variant, what)


def walk_and_come_back(watched, steps, variant, what: str) -> None:
    """P, → through the narration into the replay (each press a new step, never a new variant),
    Esc, P again; twice, so that leaving never strands the teacher."""
    page = watched.page
    for round_ in (1, 2):
        if page.is_hidden("#presenter"):
            page.keyboard.press("p")
        page.wait_for_selector("#presenter", state="visible")
        seen = [where(page)]
        # → walks every step of the narration and then into the replay: each press a new step
        while not seen[-1].startswith("Replay") and len(seen) <= len(steps) + 1:
            page.keyboard.press("ArrowRight")
            page.wait_for_function("before => document.querySelector('.presenter-where')"
                                   ".textContent !== before", arg=seen[-1])
            seen.append(where(page))
            assert variant_on_show(page) == variant, f"{what}: → changed the variant"
        assert seen[-1].startswith("Replay: step 1 of"), seen
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => document.querySelector('.presenter-where')"
                               ".textContent.startsWith('Replay: step 2 of')")
        assert variant_on_show(page) == variant
        if round_ == 1:
            watched.shot(f"{what.replace(' ', '-')}-replay", full_page=False)
        page.keyboard.press("Escape")
        page.wait_for_selector("#presenter", state="hidden")
        assert "present=" not in page.url
        page.keyboard.press("p")
        page.wait_for_selector("#presenter", state="visible")
        assert where(page).startswith("Step"), where(page)
        page.keyboard.press("Escape")
        page.wait_for_selector("#presenter", state="hidden")


def test_keys_work_after_a_click_on_the_class_bars_checkbox(room):  # noqa: F811
    teacher, _relay, _new_student = room
    page = teacher.page
    start_class(teacher, "stop_gradient")
    page.wait_for_selector("#progress", state="hidden")
    page.click(".class-members summary")
    page.click("#class-shared")
    page.wait_for_function("() => document.querySelector('#class-shared').checked")
    # the bar is drawn again with the class's new state, so the focus may have fallen to the
    # page by now (it did when this was written): the keys must work either way
    walk_and_come_back(teacher, load_catalog(SCENARIOS)["stop_gradient"].steps, "requires_grad",
                       "class checkbox")


def test_a_control_reached_by_the_keyboard_and_a_text_field_keep_their_keys(watched):
    """What the fix must not take away: a radio button the keyboard reached moves among the
    variants with its arrows, and a text field keeps P."""
    page = watched.page
    open_scenario(watched, "stop_gradient")
    page.focus("#permalink")  # the link to the view: a text field
    page.keyboard.press("p")
    page.keyboard.press("ArrowRight")
    assert page.is_hidden("#presenter")
    assert page.get_attribute("#replay-status", "data-step") == ""
    page.focus("input[name=variant][value=requires_grad]")  # as Tab reaches it: no pointer
    page.keyboard.press("ArrowRight")
    page.wait_for_url(re.compile(r".*variant=detach.*"))
    page.wait_for_selector("#progress", state="hidden")
    assert page.get_attribute("#replay-status", "data-step") == ""
