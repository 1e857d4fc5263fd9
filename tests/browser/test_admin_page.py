"""The admin page in a real Chromium against a real server with a token (issue 39): opened
without it, the page says what to do and offers a field; given the token there, it shows the
class a teacher started with its members (a hostile name as text), and its Remove button
removes the member, whose own next request is refused. axe finds no serious or critical
violation on either face of the page; screenshots of both are kept."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server import serve

from .axe import audit
from .conftest import Watched
from .test_accessibility import assert_clean

pytestmark = pytest.mark.browser

TOKEN = "admin-browser-s3cret"
HOSTILE = "<b>bold</b> & \u202eevil"
SLOW = "import time\nimport torch\ntime.sleep(60)\n"


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="browser/admin-server", TOKEN=TOKEN,
               POOL_SIZE="0", WARM_SCENARIOS="false", SELFTEST="false") as base:
        yield base


@pytest.fixture
def admin_page(browser, token_server, request):
    context = browser.new_context(viewport={"width": 1366, "height": 900}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    w = Watched(page, token_server, request.node.name.replace("test_", "", 1))
    yield w
    context.close()
    assert not w.foreign, f"requests to other hosts: {w.foreign}"
    # the page itself is answered 401 until the token is given: Chromium logs that load
    unexpected = [e for e in w.errors if "status of 401" not in e]
    assert not unexpected, f"console errors: {unexpected}"


def test_the_admin_page_opens_with_the_token_and_removes_a_member(admin_page, token_server):
    with httpx.Client(base_url=token_server, timeout=60) as teacher, \
            httpx.Client(base_url=token_server, timeout=60) as student:
        assert teacher.get("/").status_code == 200 and student.get("/").status_code == 200
        code = teacher.post("/api/classes", json={},
                            headers={"Authorization": f"Bearer {TOKEN}"}).json()["code"]
        assert student.get(f"/c/{code}").status_code == 200
        named = student.put(f"/api/classes/{code}/name", json={"name": HOSTILE})
        assert named.status_code == 200, named.text
        name = named.json()["name"]
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        sent = teacher.post("/api/runs?wait=false", json={"source": SLOW, "name": "slow.py"},
                            headers=bearer)
        assert sent.status_code == 202, sent.text
        run_id = sent.json()["id"]
        deadline = time.monotonic() + 60
        while teacher.get(f"/api/runs/{run_id}/status").json()["state"] != "running":
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.2)

        page = admin_page.page
        page.goto(admin_page.base + "/admin")
        page.wait_for_selector("#admin-token-form")
        locked = audit(page)
        admin_page.shot("locked")
        page.fill("#admin-token", TOKEN)
        page.click("#admin-token-form button[type=submit]")
        article = page.wait_for_selector(f'.admin-class[data-code="{code}"]')
        # the name is the text the member chose, shown as text (no <b> element made of it)
        assert article.query_selector(".admin-name").text_content() == name
        assert article.query_selector(".admin-name b") is None
        assert article.query_selector(".admin-members-count").text_content() == "1"
        opened = audit(page)
        admin_page.shot("opened")
        assert_clean(("the admin page, locked", locked), ("the admin page, opened", opened))

        article.query_selector("form.admin-action button[aria-label^='Remove']").click()
        page.wait_for_function(
            f"""() => document.querySelector('.admin-class[data-code="{code}"] '
                + '.admin-members-count')?.textContent === '0'""")
        assert "removed from class" in page.text_content("#admin-said")
        admin_page.shot("removed")
        barred = student.get(f"/api/classes/{code}")
        assert barred.status_code == 403 and barred.json()["code"] == "removed_from_class"
        stop = page.wait_for_selector(f'tr[data-run="{run_id}"] button')
        assert stop.get_attribute("aria-label") == "Stop the run slow.py"
        stop.click()
        page.wait_for_function(
            f"""() => document.querySelector('tr[data-run="{run_id}"] .admin-state')
                ?.textContent === 'stopped'""")
        admin_page.shot("stopped")
        assert teacher.get(f"/api/runs/{run_id}/status").json()["state"] == "stopped"
        # the token was kept: the page opens at once the next time
        page.goto(admin_page.base + "/admin")
        page.wait_for_selector(f'.admin-class[data-code="{code}"]')
