"""The sentence over the graph while a backward pass replays (static/js/replay.js), made in
Chromium from passes the tracer recorded, next to what PyTorch did in a plain run: where the
gradient starts (1, or the gradient the script passed), and what a leaf's AccumulateGrad does
with what reaches it (adds it to .grad, or drops it when requires_grad was switched off)."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import module_page

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")

SAY = """([ev, step]) => {
  const el = document.createElement("p");
  const nodes = new Map(ev.graph.nodes.map((n) => [n.id, n]));
  window.replay.renderReplayStatus(el, ev, window.replay.replayState(ev, step), nodes);
  return el.textContent;
}"""


@pytest.fixture(scope="module")
def replay(browser):
    with module_page(browser, "replay.js", "replay") as page:
        yield page


def said(page, event: dict, step: int) -> str:
    return page.evaluate(SAY, [event, step])


SEEDED = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    (w * 3).backward(gradient=torch.tensor([10.0, 20.0]))
    (w * 3).sum().backward()
"""


def test_the_replay_starts_from_the_gradient_the_script_passed(replay, trace_source):
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    (w * 3).backward(gradient=torch.tensor([10.0, 20.0]))
    assert w.grad.tolist() == [30.0, 60.0]  # 3 × the given gradient, not 3 × 1
    seeded, plain = trace_source(SEEDED)["events"]
    first = said(replay, seeded, 0)
    assert "starts at the output from the gradient the script passed" in first, first
    assert "= 1" not in first
    assert "(d output / d output = 1)" in said(replay, plain, 0)


DROPPED = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    x = torch.tensor([3.0, 4.0], requires_grad=True)
    z = (w * x).sum()
    w.requires_grad_(False)
    z.backward()
"""


def test_a_leaf_whose_requires_grad_went_off_is_not_said_to_add_to_grad(replay, trace_source):
    ns: dict = {}
    exec(compile(textwrap.dedent(DROPPED), "<plain>", "exec", dont_inherit=True), ns)
    assert ns["w"].grad is None and ns["x"].grad.tolist() == [1.0, 2.0]
    (event,) = trace_source(DROPPED)["events"]
    lines = {}
    for step, node in enumerate(event["order"], start=1):
        kind = next(n for n in event["graph"]["nodes"] if n["id"] == node)
        if kind["kind"] in ("param", "leaf"):
            lines[kind.get("param") or kind["label"]] = said(replay, event, step)
    assert "drops its gradient" in lines["w"] and "adds its gradient" not in lines["w"], lines
    assert "adds its gradient into x.grad" in lines["x"], lines
