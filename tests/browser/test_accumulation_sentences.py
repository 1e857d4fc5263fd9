"""The lead sentence of a parameter's story after a backward pass (static/js/accumulation.js),
made in Chromium from passes the tracer recorded, next to the .grad PyTorch left in a plain run:
a parameter used twice has .grad = their sum only where .grad was None before the pass and no
hook changed what arrived."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import module_page

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")

LEAD = """([doc, index, name]) => {
  const ev = doc.events[index];
  const hooks = { cell: null, onCell() {}, onHover() {}, onPickNode() {}, onEvent() {},
                  onLine() {}, diagnostics: [], chartScale: 1 };
  const view = window.acc.paramView(doc, ev, name, hooks);
  document.body.append(view);
  return view.querySelector(".accumulation .lead-in").textContent;
}"""


@pytest.fixture(scope="module")
def accumulation(browser):
    with module_page(browser, "accumulation.js", "acc") as page:
        yield page


TWICE = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    grads = []
    for _ in range(2):  # no zero_grad between the passes
        (w * 2 + w * 3).sum().backward()
        grads.append(w.grad.clone())
"""

HOOKED = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    w.register_hook(lambda g: g * 10)
    (w * 2 + w * 3).sum().backward()
"""


def plain(code: str) -> dict:
    ns: dict = {}
    exec(compile(textwrap.dedent(code), "<plain>", "exec", dont_inherit=True), ns)
    return ns


def test_two_uses_add_up_to_grad_only_from_none_and_without_a_hook(accumulation, trace_source):
    first, second = plain(TWICE)["grads"]
    assert first.tolist() == [5.0, 5.0]  # 2 + 3: the sum of the two uses
    assert second.tolist() == [10.0, 10.0]  # what it held plus the sum, not the sum
    doc = trace_source(TWICE)
    lead = [accumulation.evaluate(LEAD, [doc, i, "w"]) for i in (0, 1)]
    assert lead[0].endswith("each use sends its own gradient, and .grad is their sum."), lead
    assert lead[1].endswith(".grad is what it held before plus their sum."), lead

    assert plain(HOOKED)["w"].grad.tolist() == [50.0, 50.0]  # the hook's × 10, not 2 + 3
    hooked = accumulation.evaluate(LEAD, [trace_source(HOOKED), 0, "w"])
    assert hooked.endswith(".grad is their sum, with its hooks' change."), hooked


RETURNED = """
    import torch
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda g: g * 10)
    (got,) = torch.autograd.grad((w * 2 + w * 3).sum(), [w])
"""

WHOLE = """([doc, index, name]) => {
  const ev = doc.events[index];
  const hooks = { cell: null, onCell() {}, onHover() {}, onPickNode() {}, onEvent() {},
                  onLine() {}, diagnostics: [], chartScale: 1 };
  const view = window.acc.paramView(doc, ev, name, hooks);
  document.body.append(view);
  return [view.querySelector(".accumulation .lead-in").textContent,
          view.querySelector(".accumulation .check").textContent, view.textContent];
}"""


def test_a_hook_on_an_autograd_grad_input_is_its_change_to_what_was_returned(accumulation,
                                                                              trace_source):
    ns = plain(RETURNED)
    assert ns["got"].tolist() == [50.0, 50.0] and ns["w"].grad is None  # the hook's × 10
    lead, check, text = accumulation.evaluate(WHOLE, [trace_source(RETURNED), 0, "w"])
    assert lead.endswith("what autograd.grad returns is their sum, with its hooks' change."), lead
    # the bars measure the sum of all entries: PyTorch's 50 + 50
    assert "they agree" in check and f"= {ns['got'].sum().item():g};" in check, check
    assert "its change to what autograd.grad returned" in text
    assert "on the way into .grad" not in text
