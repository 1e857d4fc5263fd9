"""A run that recorded no backward pass but has graphs to show (nodes called by hand, a
torch.func function's forward graph) opens on those graphs, in a real Chromium: no error, no
empty page (issue 24)."""

from __future__ import annotations

import httpx
import pytest

from .conftest import Watched

pytestmark = pytest.mark.browser

BY_HAND = """\
import torch
w = torch.tensor([1.0, 2.0], requires_grad=True)
y = (w * 3).sum()
print(y.grad_fn(torch.tensor(1.0)))
"""


def run_pasted(watched: Watched, source: str) -> str:
    """Paste and run `source`; the run's id once its page has loaded it."""
    page = watched.page
    page.goto(watched.base + "/own-code")
    page.fill("#source", source)
    page.wait_for_selector("#device option[value=cpu]", state="attached")
    page.click("#run")
    page.wait_for_url("**/runs/**")
    page.wait_for_function("() => !document.body.classList.contains('loading')")
    return page.url.split("/runs/")[1].split("?")[0]


def test_nodes_called_by_hand_show_their_graph_and_the_note(watched):
    page = watched.page
    run_id = run_pasted(watched, BY_HAND)
    doc = httpx.get(f"{watched.base}/api/runs/{run_id}", timeout=10).json()
    assert doc["error"] is None and doc["events"] == []
    page.wait_for_function("() => { const img = document.querySelector('#views .run-view img');"
                           " return img && img.complete && img.naturalWidth > 0; }")
    caption = page.text_content("#views figcaption")
    assert "the graph of y, whose nodes the script calls by hand at line 4" in caption
    assert "3 nodes" in caption  # SumBackward0, MulBackward0, w
    assert "drawn below" in page.text_content("#graph")
    assert "calls autograd nodes by hand at line 4" in page.text_content("#diagnostics")
    shown = page.eval_on_selector_all(  # an error said on the page, not a hidden placeholder
        ".notice-error", "els => els.filter(e => e.offsetParent !== null).map(e => e.textContent)")
    assert shown == []
    watched.shot("nodes-called-by-hand")
