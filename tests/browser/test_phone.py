"""A phone (390 x 844, touch): no page scrolls sideways, a tap picks a node, two fingers zoom.

Chromium's mobile emulation widens the layout viewport to fit content that is too wide (as a
phone's browser does), so a page that overflows shows up as a scroll width above 390."""

from __future__ import annotations

import re

import httpx
import pytest

from .conftest import Watched, box, inside, label_px, screen, settled

pytestmark = pytest.mark.browser

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True,
         "device_scale_factor": 2}
SCRIPT = """\
import torch

w = torch.randn(3, requires_grad=True)
loss = (w * w).sum() + (w * 2).sum()
loss.backward()
"""


@pytest.fixture
def phone(browser, server, request):
    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.set_default_timeout(60_000)
    w = Watched(page, server, request.node.name.replace("test_", "", 1))
    yield w
    context.close()
    assert not w.foreign, f"requests to other hosts: {w.foreign}"
    assert not w.errors, f"console errors: {w.errors}"


def widths(page) -> tuple[int, int]:
    return page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")


def viewport_zoom(page) -> float:
    """The scale svg-pan-zoom gives the drawing (the `a` of its viewport's matrix)."""
    transform = page.get_attribute("#graph svg .svg-pan-zoom_viewport", "transform")
    return float(re.match(r"matrix\(([-\d.e]+)", transform).group(1))


def test_no_page_scrolls_sideways_on_a_phone(phone):
    page = phone.page
    run = httpx.post(phone.base + "/api/runs", json={"source": SCRIPT}, timeout=120).json()
    pages = {"index": "/", "scenario": "/scenarios/reused_layer",
             "run": run["run"]["link"], "own-code": "/own-code"}
    for name, path in pages.items():
        page.goto(phone.base + path)
        if name in ("scenario", "run"):
            page.wait_for_selector("#graph svg g.node")
            page.wait_for_selector("#progress", state="hidden")
        scroll, inner = widths(page)
        assert inner == 390 and scroll <= 390, f"{name}: the page is {scroll} px wide"
        phone.shot(name)


def test_a_tap_picks_a_node_and_two_fingers_zoom(phone):
    page = phone.page
    page.goto(phone.base + "/scenarios/reused_layer")
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    # tap the loss node (the backward pass starts there): the details panel shows it
    node = page.locator("#graph svg g.node", has_text="MseLossBackward0")
    node.scroll_into_view_if_needed()
    box = node.bounding_box()
    page.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector("#graph svg g.node.is-selected")
    assert "MseLossBackward0" in page.text_content("#graph svg g.node.is-selected")
    assert "MseLossBackward0" in page.text_content("#details-body")
    # its details are a sheet over the graph: put it away to have the whole graph again
    page.locator("#details-close").tap()
    page.wait_for_selector("#details-close", state="hidden")
    # pinch outwards about the graph's middle: the drawing grows
    graph = page.locator("#graph").bounding_box()
    cx, cy = graph["x"] + graph["width"] / 2, graph["y"] + graph["height"] / 2
    before = viewport_zoom(page)
    cdp = page.context.new_cdp_session(page)

    def touch(kind: str, spread: float) -> None:
        points = [] if kind == "touchEnd" else [
            {"x": cx - spread, "y": cy, "id": 0}, {"x": cx + spread, "y": cy, "id": 1}]
        cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})

    touch("touchStart", 30)
    for spread in (45, 60, 75, 90):
        touch("touchMove", spread)
    touch("touchEnd", 0)
    grown = ("() => parseFloat(document.querySelector('#graph svg .svg-pan-zoom_viewport')"
             f".getAttribute('transform').slice(7)) > {before} * 2")
    page.wait_for_function(grown)
    assert viewport_zoom(page) == pytest.approx(before * 3, rel=0.1)  # fingers 3x further apart
    phone.shot("pinched")
    assert widths(page)[0] <= 390


def test_a_phone_opens_on_the_graph_and_a_tap_shows_a_sheet(phone):
    """Issue 21: on a 390 x 844 phone the graph starts in the upper half of the first screen,
    its labels are legible there, and a tapped node's details come up over the graph (they
    were 2,000 px further down the page)."""
    page = phone.page
    page.goto(phone.base + "/scenarios/reused_layer")
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    settled(page)
    first = screen(page)
    graph = box(page, "#graph")
    assert graph["y"] < first["height"] / 2, f"the graph starts {graph['y']:.0f} px down"
    assert inside(graph, first), graph
    labels = label_px(page)
    assert labels >= 12, f"labels are {labels:.1f} px at the opening zoom"
    phone.shot("opening", full_page=False)
    # the scenario's parameter is in view: tap it
    node = page.locator("#graph svg g.node", has_text="middle_linear.weight")
    tapped = node.bounding_box()
    assert inside({**tapped, "right": tapped["x"] + tapped["width"],
                   "bottom": tapped["y"] + tapped["height"]}, graph)
    page.touchscreen.tap(tapped["x"] + tapped["width"] / 2, tapped["y"] + tapped["height"] / 2)
    page.wait_for_selector("#details .param-view[data-param='middle_linear.weight']")
    page.wait_for_selector("#details-close", state="visible")
    settled(page)
    assert page.evaluate("() => window.scrollY") == 0  # nothing jumped
    sheet = box(page, "#details")
    assert sheet["y"] > graph["y"] and sheet["y"] < first["height"], sheet
    assert inside(box(page, "#details .param-name"), first)
    # the node it shows stays in view above the sheet
    picked = box(page, "#graph svg g.node.is-selected")
    assert picked["bottom"] <= sheet["y"] + 1 and picked["y"] >= graph["y"] - 1, picked
    phone.shot("sheet", full_page=False)
    page.locator("#details-close").tap()
    page.wait_for_selector("#details-close", state="hidden")
    assert page.locator("#graph svg g.node.is-selected").count() == 0
    assert "param=" not in page.url
