"""A reentrant checkpoint's inner backward in a real Chromium (issue 34): the weights' gradients
arrive in a backward pass autograd runs inside the script's, and the page once said "uses 0" and
".grad keeps its earlier value" while PyTorch had filled .grad. Held here against the same script
run plainly in the test."""

from __future__ import annotations

import textwrap

import httpx
import pytest
import torch

pytestmark = pytest.mark.browser

REENTRANT = textwrap.dedent("""\
    import torch
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    y = checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True)
    y.sum().backward()
""")


def _plain_weight_grad() -> torch.Tensor:
    scope: dict = {}
    exec(compile(REENTRANT, "<plain>", "exec", dont_inherit=True), scope)
    return scope["lin"].weight.grad


def test_a_weight_filled_by_an_inner_pass_is_not_said_unchanged(watched):
    expected = _plain_weight_grad()
    assert expected is not None  # PyTorch filled it, through the checkpoint's own backward
    run = httpx.post(watched.base + "/api/runs", json={"source": REENTRANT}, timeout=120).json()
    assert run["error"] is None, run["error"]
    page = watched.page
    page.goto(f"{watched.base}{run['run']['link']}?param=weight")
    page.wait_for_selector("#details .param-view")
    panel = page.locator("#details .param-view").inner_text()
    assert "keeps its earlier value" not in panel
    assert "added by the backward inside this one" in panel
    total = page.locator("#details .acc-bar.total")
    assert total.count() == 1
    # the total bar is .grad after the pass, as PyTorch left it (the sum of its entries)
    assert float(total.get_attribute("data-value")) == pytest.approx(
        float(expected.sum()), rel=1e-5, abs=1e-6)
    assert "they agree" in page.locator("#details .check").inner_text()
    watched.shot("inner-pass")
