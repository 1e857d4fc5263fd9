"""Real-browser fixtures: uvicorn in a subprocess on a free loopback port, Debian's Chromium
driven by Playwright, and a page that records console errors and requests to other hosts.

Every browser test fails if the page logged a console error or asked any host but the test
server for anything (the app must work offline). Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from tests.server import ARTIFACTS as _ALL_ARTIFACTS
from tests.server import ROOT, serve, serve_folder

ARTIFACTS = _ALL_ARTIFACTS / "browser"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> str:
    """Base URL of a real server process, started the way `autograd-lab serve` starts it."""
    with serve(tmp_path_factory.mktemp("store"), name="browser/server",
               TRACE_TIMEOUT="120") as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("Debian's chromium is not installed (make system-deps-test)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _said(message) -> str:
    """A console error as text; a failed load names its address, so that a test can tell a
    404 it expects (a class asked for after it ended) from one it does not."""
    url = (message.location or {}).get("url", "")
    if message.text.startswith("Failed to load resource") and url:
        return f"{message.text} ({url})"
    return message.text


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
        page.on("console", lambda m: m.type == "error" and self.errors.append(_said(m)))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("request", lambda r: urlparse(r.url).scheme in ("http", "https", "ws", "wss")
                and urlparse(r.url).hostname != host and self.foreign.append(r.url))

    def shot(self, name: str, full_page: bool = True) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.test_name}-{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


@contextlib.contextmanager
def watched_at(browser, server: str, size: tuple[int, int], name: str, **options):
    """A Watched page in a fresh context of `size`; a phone's size (600 px wide or less) is a
    touch phone's. On leaving, it fails the test for a console error or a request to another
    host. `options` go to the context (bypass_csp=True lets axe in as the test's script)."""
    width, height = size
    phone = width <= 600
    context = browser.new_context(viewport={"width": width, "height": height},
                                  is_mobile=phone, has_touch=phone, **options)
    page = context.new_page()
    page.set_default_timeout(60_000)  # a cold trace takes seconds on a small machine
    w = Watched(page, server, name)
    try:
        yield w
    finally:
        context.close()
    assert not w.foreign, f"requests to other hosts: {w.foreign}"
    assert not w.errors, f"console errors: {w.errors}"


@pytest.fixture
def watched(browser, server, request):
    with watched_at(browser, server, (1600, 900), request.node.name.replace("test_", "", 1),
                    accept_downloads=True) as w:
        yield w


def open_scenario(w: Watched, name: str, query: str = "") -> None:
    """Open a scenario page and wait until its graph is drawn and the progress is gone."""
    w.page.goto(f"{w.base}/scenarios/{name}{'?' + query if query else ''}")
    w.page.wait_for_selector("#graph svg g.node")
    w.page.wait_for_selector("#progress", state="hidden")


def api_trace(w: Watched, name: str, query: str = "") -> dict:
    """The Trace the page shows, read from the same API (served from the server's cache)."""
    return httpx.get(f"{w.base}/api/scenarios/{name}/trace?{query}", timeout=120).json()


def settled(page) -> None:
    """Wait until the graph's pan and zoom are drawn: svg-pan-zoom writes its transform on the
    next animation frame, so two frames after the page set a view, the screen shows it."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


# the labels graphviz drew (a badge's digit, drawn by the page, is not one)
_LABEL_PX = """sel => [...document.querySelectorAll(sel)].map(t => {
  const m = t.getScreenCTM();
  return parseFloat(t.getAttribute('font-size')) * Math.hypot(m.a, m.b);
}).filter(Number.isFinite)"""


def label_px(page, kind: str = "node") -> float:
    """The smallest label of the graph's nodes (or edges) on screen, in CSS px: each text's
    font size in the drawing times the drawing's scale on screen (its screen CTM)."""
    sizes = page.evaluate(_LABEL_PX, f"#graph svg g.{kind} text[font-size]")
    assert sizes, f"no {kind} labels drawn"
    return min(sizes)


def box(page, selector: str) -> dict:
    """An element's box on screen: {x, y, width, height, right, bottom}."""
    b = page.locator(selector).first.bounding_box()
    assert b is not None, f"{selector} is not shown"
    return {**b, "right": b["x"] + b["width"], "bottom": b["y"] + b["height"]}


def inside(inner: dict, outer: dict, slack: float = 1.0) -> bool:
    return (inner["x"] >= outer["x"] - slack and inner["y"] >= outer["y"] - slack
            and inner["right"] <= outer["right"] + slack
            and inner["bottom"] <= outer["bottom"] + slack)


def screen(page) -> dict:
    size = page.viewport_size
    return {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
            "right": size["width"], "bottom": size["height"]}


@contextlib.contextmanager
def module_page(browser, module: str, name: str):
    """A bare page of static/'s origin with the ES module `module` (e.g. "replay.js") imported
    as `window[name]`: a test calls the page's own sentence-making code on Traces it made."""
    page = browser.new_page()
    try:
        with serve_folder(ROOT / "static") as base:
            page.goto(f"{base}/css/app.css")  # a page of the folder's origin
            page.evaluate(f"async () => {{ window.{name} = await import('/js/{module}'); }}")
            yield page
    finally:
        page.close()
