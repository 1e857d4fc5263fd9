"""Another site's page cannot make a token-less loopback server run code: Chromium sends the
`no-cors` multipart POST that any page may send, and no run is created (issue 9, point 1)."""

from __future__ import annotations

import http.server
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest

from tests.server import free_port, serve

pytestmark = pytest.mark.browser

EVIL_PAGE = """<!doctype html><title>a page on another site</title><p id="state">sending</p>
<script>
const form = new FormData();
form.append("file", new Blob(["x = 1\\n"]), "x.py");
fetch("TARGET/api/runs", {method: "POST", mode: "no-cors", body: form})
  .then(() => { document.getElementById("state").textContent = "sent"; })
  .catch((e) => { document.getElementById("state").textContent = "failed: " + e; });
</script>"""


def _runs(store: Path) -> int:
    with sqlite3.connect(store / "runs.sqlite3") as db:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    with serve(store, name="browser/cross-site-server", SELFTEST="false") as base:
        yield base, store


@pytest.fixture(scope="module")
def evil_site(app):
    """A page served by another origin (another host name and port) that targets the app."""
    base, _ = app
    page = EVIL_PAGE.replace("TARGET", base).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    port = free_port()
    httpd = http.server.HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://localhost:{port}/"
    httpd.shutdown()


def test_a_no_cors_multipart_post_from_another_site_creates_no_run(browser, app, evil_site):
    base, store = app
    # the same request from a program that is allowed (JSON) does create a run: the count moves
    ok = httpx.post(base + "/api/runs", json={"source": "x = 1\n"}, timeout=120)
    assert ok.status_code == 200
    before = _runs(store)
    assert before >= 1
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(evil_site)
        page.wait_for_function("document.getElementById('state').textContent !== 'sending'")
        # the browser sent it (an opaque answer is all a no-cors page gets) ...
        assert page.text_content("#state") == "sent"
    finally:
        context.close()
    # ... and the server refused it: no run was stored (an accepted one answers only once its
    # run is done, so it would be counted by now)
    assert _runs(store) == before
