"""The page's view state (static/js/view_state.js): a student following a teacher gets the
teacher's view applied in place (address and drawing), and the browser's Back still works on the
student's page afterwards (following once forged a popstate, which put that at risk)."""

from __future__ import annotations

import re

import pytest

from .test_class import class_of_one, followers, room, selected, wait_selected  # noqa: F401

pytestmark = pytest.mark.browser


def test_following_applies_the_teachers_view_and_back_still_works(room):  # noqa: F811
    teacher, _relay, new_student = room
    student, code = class_of_one(teacher, new_student, "stop_gradient")
    student.page.evaluate("() => { window.sameDocument = true; }")

    # the teacher picks a node: the student's address and drawing follow, without a reload
    teacher.page.wait_for_selector("#progress", state="hidden")
    student.page.wait_for_selector("#progress", state="hidden")
    teacher.page.click("#graph svg g.node >> nth=1")
    picked = selected(teacher)
    wait_selected(student, picked)
    student.page.wait_for_url(re.compile(r".*node=.*"))
    assert student.page.evaluate("() => window.sameDocument === true")
    student.shot("applied")

    # on their own, the student changes the run (a history entry of theirs), then goes Back:
    # the page redraws the teacher's view it had, in the same document
    student.page.click("#class-unfollow")
    followers(teacher, 0)
    before = student.page.url
    student.page.click("label.variant-choice:has(input[value=detach])")
    student.page.wait_for_url(re.compile(r".*variant=detach.*"))
    student.page.wait_for_selector("#progress", state="hidden")
    student.page.go_back()
    student.page.wait_for_url(before)
    student.page.wait_for_selector("label.variant-choice input[value=detach]:not(:checked)",
                                   state="attached")
    student.page.wait_for_selector("#graph svg g.node")
    wait_selected(student, picked)
    assert student.page.evaluate("() => window.sameDocument === true")
    student.shot("after-back")
