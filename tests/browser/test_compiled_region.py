"""A CompiledFunctionBackward node's panel says what AOTAutograd made of its region: the
forward's and backward's op counts, what the forward saved, what the backward recomputes (each
checked against AOTAutograd's own partition in tests/trace/test_compile_graphs.py), with the
two graphs' ops folded away."""

from __future__ import annotations

import httpx
import pytest

from tests.trace.test_compile import MODELS

pytestmark = pytest.mark.browser

SCRIPT = MODELS + """
torch.manual_seed(0)
model = torch.compile(MLP())
model(torch.randn(5, 4)).pow(2).mean().backward()
"""


def test_a_compiled_regions_node_shows_its_graphs_counts(watched):
    page = watched.page
    run = httpx.post(watched.base + "/api/runs", json={"source": SCRIPT}, timeout=300).json()
    assert run["error"] is None, run["error"]
    (region,) = run["compiled_regions"]
    (node_id,) = [n["id"] for n in run["events"][0]["graph"]["nodes"]
                  if n["name"] == "CompiledFunctionBackward"]
    page.goto(watched.base + run["run"]["link"])
    page.wait_for_selector("#graph svg g.node")
    page.wait_for_selector("#progress", state="hidden")
    page.click(f"#graph svg g.node#{node_id}")
    page.wait_for_selector("#details-body .compiled-region")
    counts = page.text_content("#details-body .compiled-counts")
    fw, bw = region["forward"]["op_count"], region["backward"]["op_count"]
    recomputed = len(region["recomputed"])
    assert counts.startswith(f"forward {fw} ops; backward {bw} ops; "
                             f"saves {region['saved_count']} tensors (")
    assert f"; recomputes {recomputed} op" in counts
    # the two graphs' ops, folded until opened
    ops = page.locator("#details-body details.fx-graph ol.fx-ops").first
    assert not ops.is_visible()
    page.click("#details-body details.fx-graph summary >> nth=0")
    assert ops.is_visible()
    assert page.locator("#details-body details.fx-graph").nth(0).locator("li").count() == fw
    watched.shot("compiled-region", full_page=False)


@pytest.mark.parametrize("size", [(1920, 1080), (1280, 720)], ids=["1920x1080", "1280x720"])
def test_presenter_mode_says_what_aotautograd_made_of_the_region(watched, size):
    """Presenter mode hides the details panel, so the compiled_backward step that points at the
    CompiledFunctionBackward node says the region's counts in its own box, on screen."""
    from app.catalog import load_catalog
    from tests.conftest import SCENARIOS

    from .conftest import api_trace, box, inside, open_scenario, screen, settled

    page = watched.page
    page.set_viewport_size({"width": size[0], "height": size[1]})
    steps = load_catalog(SCENARIOS)["compiled_backward"].steps
    (n,) = [i for i, s in enumerate(steps, 1) if {"node": "CompiledFunctionBackward"} in s["show"]]
    doc = api_trace(watched, "compiled_backward")
    (region,) = doc["compiled_regions"]
    open_scenario(watched, "compiled_backward", "present=1")
    page.wait_for_selector("#presenter", state="visible")
    for step in range(1, n + 1):  # walked as a presenter walks them
        if step > 1:
            page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => location.search.includes('say={step}')")
    page.wait_for_selector(f".presenter-region[data-region='{region['id']}']")
    settled(page)
    said = page.text_content(".presenter-region")
    fw, bw = region["forward"]["op_count"], region["backward"]["op_count"]
    assert said.startswith(f"Compiled by AOTAutograd: forward {fw} ops; backward {bw} ops; "
                           f"saves {region['saved_count']} tensors (")
    for saved in region["saved"]:
        assert saved["name"] in said
    assert f"; recomputes {len(region['recomputed'])} op" in said
    assert inside(box(page, ".presenter-region"), screen(page))
    watched.shot("presenter", full_page=False)
    # a step that points at no compiled node says nothing of it
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(f"() => location.search.includes('say={n - 1}')")
    assert page.locator(".presenter-region").count() == 0
