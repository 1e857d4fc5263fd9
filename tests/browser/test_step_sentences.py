"""The sentences that say how an optimizer step moved a weight (static/js/step_rule.js), made
in Chromium from steps the tracer recorded, each next to what torch.optim did in a plain run of
the same script: the settings where a sentence once said something PyTorch does not do (Adam's
lead without its sign and bias correction, weight decay under maximize, a GradScaler step after
the script's own unscale_). One page, no server: step_rule.js imported from the static folder."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import module_page

pytestmark = pytest.mark.browser
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def rules(browser):
    with module_page(browser, "step_rule.js", "rule") as page:
        yield page


def said(page, doc: dict, name: str = "w") -> list[str]:
    """What the page says of the run's last step for parameter `name`."""
    step = [e for e in doc["events"] if e["kind"] == "step"][-1]
    return page.evaluate("([ev, name]) => window.rule.ruleSentences(ev, ev.params[name])",
                         [step, name])


def plain(code: str) -> dict:
    ns: dict = {}
    exec(compile(textwrap.dedent(code), "<plain>", "exec", dont_inherit=True), ns)
    return ns


ADAM = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0, -3.0]))
    opt = torch.optim.Adam([w], lr=0.01)
    changes, grads = [], []
    for k in range(2):
        opt.zero_grad()
        (w * torch.tensor([3.0, -5.0, 0.5]) * (k + 1)).sum().backward()
        before = w.detach().clone()
        grads.append(w.grad.clone())
        opt.step()
        changes.append(w.detach() - before)
"""


def test_adams_lead_is_minus_lr_times_the_bias_corrected_means(rules, trace_source):
    ns = plain(ADAM)
    b1, b2, lr, eps = 0.9, 0.999, 0.01, 1e-8
    m = v = torch.zeros(3)
    for t, (g, change) in enumerate(zip(ns["grads"], ns["changes"], strict=True), start=1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        corrected = -lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
        assert torch.allclose(change, corrected, rtol=1e-4, atol=1e-9)
        # the sentence as it was, "lr × the running mean ÷ the root of the running mean of its
        # square": the wrong sign, and about 3 × too large on the first step
        assert not torch.allclose(change, lr * m / v.sqrt(), rtol=0.1)
    lead = said(rules, trace_source(ADAM))[0]
    assert ("Adam step #3: each weight moves by −lr × the running mean of its gradient ÷ (the "
            "root of the running mean of its square + eps), each mean first divided by 1 − its "
            "beta^step (both start at 0)") in lead, lead


DECAY_UP = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.{name}([w], lr=0.1, weight_decay=0.5, maximize=True)
    w.grad = torch.zeros(2)  # no gradient: only the decay moves it
    opt.step()
"""


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_weight_decay_under_maximize_still_shrinks_the_weight(rules, trace_source, name):
    code = DECAY_UP.replace("{name}", name)
    w = plain(code)["w"].detach()
    # maximize negates the gradient, not the decay: each weight moves toward 0
    assert (w.abs() < torch.tensor([1.0, 2.0])).all() and (w.sign() == torch.tensor([1, -1])).all()
    text = " ".join(said(rules, trace_source(code)))
    assert "maximize: up the gradient, not down" in text
    assert "to the negated gradient: maximize flips only the gradient" in text, text
    assert ("the decay still shrinks the weight" if name == "SGD" else
            "the decay still pulls the weight toward 0") in text


CLIPPED = """
    import torch
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale((w * torch.tensor([3.0, 40.0])).sum()).backward()
    scaler.unscale_(opt)
    unscaled = w.grad.clone()
    torch.nn.utils.clip_grad_norm_([w], max_norm=1.0)
    clipped = w.grad.clone()
    scaler.step(opt)
    scaler.update()
"""


def test_a_scaler_step_after_unscale_does_not_say_scaler_step_divided(rules, trace_source):
    ns = plain(CLIPPED)
    # unscale_ divided .grad already; the step used the clipped .grad, not .grad ÷ 1024
    assert ns["unscaled"].tolist() == [3.0, 40.0]
    assert torch.allclose(ns["w"].detach(), torch.tensor([1.0, -2.0]) - 0.1 * ns["clipped"])
    text = said(rules, trace_source(CLIPPED))[-1]
    assert text.startswith("A GradScaler ran this step: the script's scaler.unscale_ had "
                           "already divided each .grad by its scale (1024), so scaler.step did "
                           "not divide again"), text
    assert "scaler.step divided" not in text and ".grad ÷ 1024" not in text
