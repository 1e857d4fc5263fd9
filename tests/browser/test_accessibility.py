"""axe-core on every kind of page, in a real Chromium against a real server: the index, a
scenario, the Your-code page, a stored run with findings, and a class seen by its teacher and
by a student. No page may have a serious or critical violation."""

from __future__ import annotations

import pytest

from .axe import audit, said, serious
from .conftest import Watched, open_scenario
from .test_class import join, start_class

pytestmark = pytest.mark.browser

# a parameter the optimizer never steps and one that gets no gradient: findings on the run page
WITH_FINDINGS = """import torch
w = torch.nn.Parameter(torch.ones(3))
unused = torch.nn.Parameter(torch.ones(3))
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(2):
    loss = (w * torch.arange(3.0)).sum()
    loss.backward()
    opt.step()
"""


@pytest.fixture
def audited(browser, server, request):
    """A page like `watched`'s, at a laptop's size, in a context that lets axe be injected."""
    made = []

    def new(who: str = "page") -> Watched:
        context = browser.new_context(viewport={"width": 1366, "height": 768}, bypass_csp=True)
        page = context.new_page()
        page.set_default_timeout(60_000)
        w = Watched(page, server, f"{request.node.name.replace('test_', '', 1)}-{who}")
        made.append((context, w))
        return w

    yield new
    for context, w in made:
        context.close()
        assert not w.foreign, f"requests to other hosts: {w.foreign}"
        assert not w.errors, f"console errors: {w.errors}"


def assert_clean(*audits: tuple[str, list[dict]]) -> None:
    """Every page audited, then one assertion: a failure lists each page's violations."""
    found = [(what, serious(violations)) for what, violations in audits]
    counts = ", ".join(f"{what}: {len(bad)}" for what, bad in found)
    listed = "\n".join(f"-- {what}:\n{said(bad)}" for what, bad in found if bad)
    assert not any(bad for _, bad in found), (
        f"serious or critical violations by page ({counts}):\n{listed}")


def test_index_has_no_serious_violation(audited):
    w = audited()
    w.page.goto(w.base + "/")
    w.page.wait_for_selector("#scenario-cards .card")
    assert_clean(("the index", audit(w.page)))


def test_scenario_page_has_no_serious_violation(audited):
    w = audited()
    open_scenario(w, "stop_gradient")
    first = audit(w.page)
    # a parameter picked: its bars and heat maps in the details panel
    w.page.click("#params-body button >> nth=0")
    w.page.wait_for_selector("#details .param-view")
    assert_clean(("a scenario page", first),
                 ("a scenario page with a parameter picked", audit(w.page)))


def test_own_code_page_and_a_run_with_findings_have_no_serious_violation(audited):
    w = audited()
    page = w.page
    page.goto(w.base + "/own-code")
    page.wait_for_selector("#device option[value=cpu]", state="attached")
    own_code = audit(page)
    page.fill("#source", WITH_FINDINGS)
    page.click("#run")
    page.wait_for_url("**/runs/**")
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    # the run has findings, shown: the page audited is the one the issue is about
    page.wait_for_selector("#diagnostics-list li")
    assert_clean(("the Your-code page", own_code), ("a stored run with findings", audit(page)))


def test_a_node_the_scripts_hooks_ran_on_has_no_serious_violation(audited):
    """Issue 34: the "h" badge, the node panel's list of hooks and the pass's hook line."""
    import httpx

    from .test_hook_share import HOOK_CALLS

    w = audited()
    page = w.page
    run = httpx.post(w.base + "/api/runs", json={"source": HOOK_CALLS}, timeout=120).json()
    (event,) = [e for e in run["events"] if e["kind"] == "backward"]
    node = event["hook_calls"][0]["nodes"][0]
    page.goto(f"{w.base}{run['run']['link']}?event={event['index']}&node={node}")
    page.wait_for_selector("#details .hook-call")
    page.wait_for_selector("#graph .hook-badge")
    assert_clean(("a node with a hook", audit(page)))


def test_class_pages_of_teacher_and_student_have_no_serious_violation(audited):
    teacher, student = audited("teacher"), audited("student")
    code = start_class(teacher, "no_grad_inference_detach")
    join(student, code, "no_grad_inference_detach")
    teacher.page.wait_for_function(
        "() => (document.querySelector('#class-followers') || {}).textContent === ' · 1 following'")
    for w in (teacher, student):
        w.page.wait_for_selector("#progress", state="hidden")
        w.page.wait_for_selector("#diagnostics-list li")  # a scenario with findings
    assert_clean(("the teacher's class page", audit(teacher.page)),
                 ("the student's class page", audit(student.page)))
