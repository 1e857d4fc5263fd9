"""A named teacher's token revoked while their class is on (attack round 2): the teacher's page,
which follows the class with the class's cookie and no token, is told at once that it teaches
the class no more, in the class bar, as text; the student's page stays in the class."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.server import serve

from .conftest import Watched

pytestmark = pytest.mark.browser

TOKEN = "browser-revoke-s3cret"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
def server(store):
    with serve(store, name="browser/revoked-teacher", TOKEN=TOKEN, WARM_SCENARIOS="false",
               SELFTEST="false", POOL_SIZE="0") as base:
        yield base


def _teachers(store, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AUTOGRAD_LAB_STORE_PATH": str(store / "runs.sqlite3")}
    return subprocess.run([sys.executable, "-m", "app.cli", "teachers", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_revoked_teachers_page_is_told_it_teaches_no_more(browser, server, store):
    made = _teachers(store, "add", "erin")
    assert made.returncode == 0, made.stderr
    erin = made.stdout.strip()
    pages = []
    for who in ("teacher", "student"):
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(60_000)
        pages.append((context, Watched(page, server, f"revoked-teacher-{who}")))
    (_, teacher), (_, student) = pages
    try:
        teacher.page.goto(f"{server}/scenarios/reused_layer")
        teacher.page.wait_for_selector("#graph svg g.node")
        teacher.page.once("dialog", lambda dialog: dialog.accept(erin))  # her token, once
        teacher.page.click("#class-start")
        teacher.page.wait_for_selector(".class-link")
        code = re.search(r"/c/([A-Z0-9]{6})$",
                         teacher.page.text_content(".class-link")).group(1)
        student.page.goto(f"{server}/c/{code}")
        student.page.fill("#class-name", "Ana")
        student.page.click("#class-join-button")
        student.page.wait_for_url(re.compile(r".*/scenarios/reused_layer(\?.*)?$"))

        assert _teachers(store, "revoke", "erin").returncode == 0
        # within the store's 5 s and the stream's wake-up (15 s at most)
        said = teacher.page.wait_for_selector(".class-message", timeout=45_000)
        assert "the token of teacher 'erin' was revoked" in said.text_content()
        assert f"teaches class {code} no more" in said.text_content()
        teacher.shot("revoked", full_page=False)
        assert student.page.text_content("#class-my-name") == "Ana"  # still in the class
    finally:
        for context, _ in pages:
            context.close()
    for _, w in pages:
        assert not w.foreign, f"requests to other hosts: {w.foreign}"
        # the page tried to start the class without a token first: Chromium logs that 401
        assert not [e for e in w.errors if "status of 401" not in e], w.errors
