"""Which sentence a leaf's node gets in the node panel (static/js/op_notes.js `opNote`), made in
Chromium for passes the tracer recorded: "Adds the gradient that arrives to this leaf's .grad"
only where PyTorch did add it (tests/trace/test_op_notes.py checks each sentence against torch)."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import module_page

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")

# a backward, a torch.autograd.grad, and a backward after w's requires_grad went off
PASSES = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    (w * 3).sum().backward()
    after_backward = w.grad.clone()
    torch.autograd.grad((w * 5).sum(), [w])
    after_grad = w.grad.clone()
    y = (w * 7).sum()
    w.requires_grad_(False)
    y.backward()
    after_dropped = w.grad.clone()
"""

NOTES = """([events]) => events.map((ev) => {
  const leaf = ev.graph.nodes.find((n) => n.kind === "param");
  return window.notes.opNote(leaf, ev);
})"""


def test_a_leaf_is_said_to_add_to_grad_only_in_the_passes_that_did(browser, trace_source):
    ns: dict = {}
    exec(compile(textwrap.dedent(PASSES), "<plain>", "exec", dont_inherit=True), ns)
    # PyTorch: the backward added 3s; autograd.grad and the dropped pass left .grad alone
    assert ns["after_backward"].tolist() == [3.0, 3.0]
    assert ns["after_grad"].tolist() == [3.0, 3.0] == ns["after_dropped"].tolist()
    events = trace_source(PASSES)["events"]
    assert [e.get("call") for e in events] == ["Tensor.backward", "torch.autograd.grad",
                                               "Tensor.backward"]
    with module_page(browser, "op_notes.js", "notes") as page:
        added, returned, dropped = page.evaluate(NOTES, [events])
    assert added.startswith("Adds the gradient that arrives to this leaf's .grad"), added
    assert returned.startswith("torch.autograd.grad does not run this leaf's AccumulateGrad"), \
        returned
    assert dropped.startswith("Its requires_grad was switched off after the forward"), dropped
