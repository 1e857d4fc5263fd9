"""A gradcheck the script called, on its page in a real Chromium (issue 24): the verdict and
the tolerances the check used are said above the graph of its representative pass."""

from __future__ import annotations

import httpx
import pytest

from tests.trace.test_gradcheck_events import CALL_LINE, RIGHT, WRONG

pytestmark = pytest.mark.browser


def _open(watched, source: str) -> dict:
    run = httpx.post(watched.base + "/api/runs", json={"source": source}, timeout=120).json()
    assert run["error"] is None, run["error"]
    watched.page.goto(f"{watched.base}{run['run']['link']}?event=0")
    watched.page.wait_for_selector("#event-notice:not([hidden])")
    return run


def test_a_passed_check_says_its_verdict_and_tolerances_above_the_graph(watched):
    run = _open(watched, RIGHT + "print(torch.autograd.gradcheck(Cube.apply, (x,), rtol=0.01))\n")
    check = run["events"][0]["gradcheck"]
    notice = watched.page.locator("#event-notice")
    text = " ".join(notice.inner_text().split())
    assert text.startswith(f"gradcheck at line {CALL_LINE}: passed (eps 1e-6, atol 1e-5, "
                           "rtol 0.01).")
    assert check["rtol"] == 0.01 and "representative pass of Cube" in text
    assert "notice-info" in notice.get_attribute("class")
    watched.shot("passed")


def test_a_failed_check_says_so_as_a_warning(watched):
    _open(watched, WRONG + "print(torch.autograd.gradcheck(Cube.apply, (x,), "
                           "raise_exception=False))\n")
    notice = watched.page.locator("#event-notice")
    assert f"gradcheck at line {CALL_LINE}: failed" in " ".join(notice.inner_text().split())
    assert "notice-warning" in notice.get_attribute("class")
