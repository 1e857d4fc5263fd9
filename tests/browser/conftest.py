"""Real-browser fixtures: uvicorn in a subprocess on a free loopback port, Debian's Chromium
driven by Playwright, and a page that records console errors and requests to other hosts.

Every browser test fails if the page logged a console error or asked any host but the test
server for anything (the app must work offline). Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server() -> str:
    """Base URL of a real server process, started the way `autograd-lab serve` starts it."""
    port = _free_port()
    log = (ARTIFACTS.parent / "server.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AUTOGRAD_LAB_TRACE_TIMEOUT": "120"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.web.app:create_app", "--factory",
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {log}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("Debian's chromium is not installed (make system-deps-test)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watched:
    """A page plus what it logged and requested, and a screenshot helper."""

    def __init__(self, page, base: str, test_name: str) -> None:
        self.page = page
        self.base = base
        self.test_name = test_name
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.allowed_errors: list[str] = []
        host = urlparse(base).hostname
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("request", lambda r: urlparse(r.url).scheme in ("http", "https", "ws", "wss")
                and urlparse(r.url).hostname != host and self.foreign.append(r.url))

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.test_name}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def watched(browser, server, request):
    context = browser.new_context(viewport={"width": 1600, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(60_000)  # a cold trace takes seconds on a small machine
    w = Watched(page, server, request.node.name.replace("test_", "", 1))
    yield w
    context.close()
    assert not w.foreign, f"requests to other hosts: {w.foreign}"
    assert not w.errors, f"console errors: {w.errors}"


def open_scenario(w: Watched, name: str, query: str = "") -> None:
    """Open a scenario page and wait until its graph is drawn and the progress is gone."""
    w.page.goto(f"{w.base}/scenarios/{name}{'?' + query if query else ''}")
    w.page.wait_for_selector("#graph svg g.node")
    w.page.wait_for_selector("#progress", state="hidden")


def api_trace(w: Watched, name: str, query: str = "") -> dict:
    """The Trace the page shows, read from the same API (served from the server's cache)."""
    return httpx.get(f"{w.base}/api/scenarios/{name}/trace?{query}", timeout=120).json()
