"""The class's predict-then-reveal questions (static/js/questions.js), made in Chromium from
passes the tracer recorded: the revealed answer is what PyTorch did in a plain run of the same
script. The sentence audit found two that were not: a gradient autograd dropped (requires_grad
switched off after the forward) counted as received, and an autograd.grad pass asked about
contributions "into its .grad", which autograd.grad leaves alone."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import module_page

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")

ASK = """([doc, index]) => Object.fromEntries(window.q.questionsFor(doc, doc.events[index])
  .map((x) => [x.key, { prompt: x.prompt, answer: x.choices[x.answer] }]))"""


@pytest.fixture(scope="module")
def questions(browser):
    with module_page(browser, "questions.js", "q") as page:
        yield page


def plain(code: str) -> dict:
    ns: dict = {}
    exec(compile(textwrap.dedent(code), "<plain>", "exec", dont_inherit=True), ns)
    return ns


DROPPED = """
    import torch
    g = torch.nn.Linear(2, 2)  # "the generator"
    d = torch.nn.Linear(2, 1)  # "the discriminator"
    loss = d(g(torch.ones(1, 2))).sum()
    for p in d.parameters():
        p.requires_grad_(False)  # after the forward: AccumulateGrad drops what arrives
    loss.backward()
"""

REENTRANT = """
    import torch
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    checkpoint(lambda t: torch.tanh(lin(t)), x, use_reentrant=True).sum().backward()
"""

GRAD = """
    import torch
    a = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    b = torch.nn.Parameter(torch.tensor([3.0]))
    (ga,) = torch.autograd.grad((a * 2 + a * 3).sum() + b.sum(), [a])
"""


def _received(ns: dict, module_names: list[str]) -> int:
    return sum(p.grad is not None for m in module_names for p in ns[m].parameters())


def test_a_dropped_gradient_is_not_counted_as_received(questions, trace_source):
    ns = plain(DROPPED)
    assert _received(ns, ["g"]) == 2 and _received(ns, ["d"]) == 0  # PyTorch: d got nothing
    doc = trace_source(DROPPED)
    asked = questions.evaluate(ASK, [doc, 0])
    assert "of the model's 4 parameters" in asked["grads"]["prompt"]
    assert asked["grads"]["answer"] == str(_received(ns, ["g", "d"]))  # 2, not 4


def test_a_gradient_from_an_inner_backward_is_counted_as_received(questions, trace_source):
    ns = plain(REENTRANT)
    assert _received(ns, ["lin"]) == 2  # filled by the checkpoint's own backward
    asked = questions.evaluate(ASK, [trace_source(REENTRANT), 0])
    assert asked["grads"]["answer"] == "2", asked


def test_an_autograd_grad_pass_is_asked_about_what_it_returns(questions, trace_source):
    ns = plain(GRAD)
    assert ns["a"].grad is None and ns["ga"].tolist() == [5.0, 5.0]  # .grad left alone
    doc = trace_source(GRAD)
    [index] = [i for i, e in enumerate(doc["events"]) if e["kind"] == "backward"]
    asked = questions.evaluate(ASK, [doc, index])
    assert asked["uses"]["prompt"].endswith("sum into the gradient autograd.grad returns for it?")
    assert ".grad" not in asked["uses"]["prompt"].replace("autograd.grad", "")
    assert asked["uses"]["answer"] == "2"  # a * 2 and a * 3
    assert "of the 1 inputs autograd.grad was asked for" in asked["grads"]["prompt"]
    assert asked["grads"]["answer"] == "1"
