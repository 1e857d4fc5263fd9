"""A hook on a parameter in a real Chromium (issue 24): its change is a bar of its own, so the
bars add up to .grad as PyTorch left it."""

from __future__ import annotations

import math

import httpx
import pytest

from .conftest import api_trace, open_scenario

pytestmark = pytest.mark.browser


def _open_run(watched, source: str, query: str = "") -> dict:
    """Run `source` through the server (the own-code API) and open its page; its Trace."""
    run = httpx.post(watched.base + "/api/runs", json={"source": source}, timeout=120).json()
    assert run["error"] is None, run["error"]
    watched.page.goto(f"{watched.base}{run['run']['link']}{query}")
    return run


def test_a_hook_on_a_parameter_is_its_own_bar_and_the_bars_add_up(watched):
    page = watched.page
    open_scenario(watched, "tensor_hooks", "variant=leaf_hook&param=first.weight")
    doc = api_trace(watched, "tensor_hooks", "variant=leaf_hook")
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    panel = page.locator("#details .param-view")
    assert panel.get_attribute("data-param") == "first.weight"
    uses = page.locator("#details .acc-bar.use")
    hook = page.locator("#details .acc-bar.hook")
    assert uses.count() == len(event["contributions"]["first.weight"]) == 1
    assert hook.count() == 1
    line = event["hooks"]["first.weight"][0]["lines"][0]
    assert f"hook at line {line}" in panel.inner_text()
    parts = [float(uses.nth(0).get_attribute("data-value")),
             float(hook.get_attribute("data-value"))]
    total = float(page.locator("#details .acc-bar.total").get_attribute("data-value"))
    assert math.isclose(sum(parts), total, rel_tol=1e-5, abs_tol=1e-7)
    assert parts[1] != 0  # the clamp took something away
    assert "they agree" in page.locator("#details .check").inner_text()
    assert "the hooks' share" in page.locator("#details .check").inner_text()
    watched.shot("hook-bar")


def test_autograd_grad_bars_are_held_to_what_it_returned(watched):
    """Issue 24: the bars of an autograd.grad call were compared with .grad, which the call
    leaves alone (here 2 per entry, while the uses add up to the 6 it returned)."""
    from tests.trace.test_gradient_facts import GRAD_AFTER_BACKWARD

    page = watched.page
    _open_run(watched, GRAD_AFTER_BACKWARD, "?event=1&param=x")
    page.wait_for_selector("#details .param-view")
    total = page.locator("#details .acc-bar.total")
    assert "what autograd.grad returned" in total.get_attribute("aria-label")
    assert float(total.get_attribute("data-value")) == 18.0  # 6 per entry, summed
    check = page.locator("#details .check").inner_text()
    assert "what autograd.grad returned" in check and "they agree" in check
    watched.shot("autograd-grad")


def test_parameters_no_backward_reached_come_last_under_a_heading(watched):
    """Issue 21: a 48-layer encoder's template (never called; its copies train) headed the
    table of 588 parameters."""
    from tests.trace.test_gradient_facts import TEMPLATE_LAYER

    page = watched.page
    run = _open_run(watched, TEMPLATE_LAYER)
    page.wait_for_selector("#params table.params")
    rows = page.locator("#params tbody tr")
    names = [rows.nth(i).get_attribute("class") or "" for i in range(rows.count())]
    head = names.index("unreached-head")
    params = page.locator("#params tbody tr button.param-button")
    shown = [params.nth(i).get_attribute("data-param") for i in range(params.count())]
    assert shown[0].startswith("model.layers.0.")
    assert shown[-12:] == [n for n in run["params"] if n.startswith("layer.")]
    assert all("unreached" in c for c in names[head + 1:]) and len(names) - head - 1 == 12
    assert "Never reached by a backward pass" in rows.nth(head).inner_text()


HOOK_CALLS = """
import torch
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
h = w * 2
calls = []
h.register_hook(lambda g: calls.append(g.sum().item()))  # observes: returns None
loss = (h * h).sum() + h.sum()
loss.backward()
print(len(calls), type(h.grad_fn).__name__)
"""


def test_the_node_panel_shows_the_hook_that_ran_on_it_with_its_call_count(watched, tmp_path):
    """Issue 34: a hook that only observes is shown on the node it ran on, with how many times
    PyTorch called it in the pass; the oracle is the script run plainly, counting its calls."""
    import subprocess
    import sys

    script = tmp_path / "hooked.py"
    script.write_text(HOOK_CALLS)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, check=True).stdout
    called, node_type = plain.split()
    page = watched.page
    doc = _open_run(watched, HOOK_CALLS)
    (event,) = [e for e in doc["events"] if e["kind"] == "backward"]
    (record,) = event["hook_calls"]
    node_id = record["nodes"][0]
    page.goto(page.url.split("?")[0] + f"?event={event['index']}&node={node_id}")
    panel = page.locator("#details .node-view")
    panel.wait_for()
    assert panel.locator(".op-name").inner_text() == node_type
    item = panel.locator(".hook-call")
    assert item.count() == 1
    assert item.get_attribute("data-calls") == called
    text = item.inner_text()
    assert "tensor hook on h" in text and "returned None" in text
    assert {"1": "called once in this pass", "2": "called twice in this pass"}.get(
        called, f"called {called} times in this pass") in text
    assert page.locator(f"#graph .hook-badge[data-node={node_id}]").count() == 1
    notice = page.locator("#event-notice").inner_text()
    assert f"1 hook of the script ran in backward #{event['index']}" in notice
    watched.shot("hook-calls")
