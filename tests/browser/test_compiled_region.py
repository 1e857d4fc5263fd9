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
