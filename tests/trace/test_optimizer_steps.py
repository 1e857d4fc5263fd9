"""An optimizer step as the optimizer made it (app/trace/optimizer_rules.py): each group's
settings are kept, and the step is recomputed by SGD's or Adam's documented rule and held
against the change PyTorch made. The tests run the same script with plain PyTorch and compare
the Trace with what `torch.optim` really did."""

from __future__ import annotations

import pytest
import torch

SCRIPT = """
import torch
torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(4, 3))
{hook}
opt = torch.optim.{cls}([w], {kwargs})
for _ in range(3):
    opt.zero_grad()
    loss = ((w * torch.arange(12.).view(4, 3)).sum() - 3) ** 2 / 100
    loss.backward()
    opt.step()
"""

CONFIGS = {
    "sgd": ("SGD", "lr=0.1", ""),
    # the forum's case: a hook zeroes every gradient, and weight decay still moves the weights
    "sgd-decay-zero-grad": ("SGD", "lr=0.1, weight_decay=0.1",
                            "w.register_hook(lambda g: g * 0)"),
    "sgd-momentum": ("SGD", "lr=0.1, momentum=0.9, dampening=0.1", ""),
    "sgd-nesterov": ("SGD", "lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01", ""),
    "sgd-maximize": ("SGD", "lr=0.1, maximize=True", ""),
    "adam": ("Adam", "lr=0.01", ""),
    "adam-amsgrad-decay": ("Adam", "lr=0.01, amsgrad=True, weight_decay=0.1", ""),
    "adamw": ("AdamW", "lr=0.01, weight_decay=0.1", ""),
    "adam-maximize-betas": ("Adam", "lr=0.01, maximize=True, betas=(0.8, 0.9)", ""),
}


def plain_weights(code: str) -> list[torch.Tensor]:
    """The weights after each step, as plain PyTorch leaves them (the same script, run here
    with its optimizer's step wrapped to copy them)."""
    seen: list[torch.Tensor] = []
    namespace: dict = {}
    original = {}
    for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop):
        original[cls] = cls.step

        def step(self, *args, _real=cls.step, **kwargs):
            out = _real(self, *args, **kwargs)
            seen.append(self.param_groups[0]["params"][0].detach().clone())
            return out

        cls.step = step
    try:
        exec(compile(code, "<plain>", "exec"), namespace)  # noqa: S102 - the test's own script
    finally:
        for cls, step in original.items():
            cls.step = step
    return seen


def steps_of(doc: dict) -> list[dict]:
    assert doc["error"] is None, doc["error"]
    return [e for e in doc["events"] if e["kind"] == "step"]


def values(summary: dict) -> torch.Tensor:
    return torch.tensor(summary["values"], dtype=torch.float64)


@pytest.mark.parametrize("config", CONFIGS)
def test_each_step_is_recomputed_by_its_rule_and_matches_torch(trace_source, config):
    cls, kwargs, hook = CONFIGS[config]
    code = SCRIPT.format(cls=cls, kwargs=kwargs, hook=hook)
    steps = steps_of(trace_source(code))
    plain = plain_weights(code)
    assert len(steps) == len(plain) == 3
    for event, after in zip(steps, plain, strict=True):
        assert event["optimizer"] == cls
        change = event["params"]["w"]
        # the Trace's weights after the step are PyTorch's own
        assert torch.allclose(values(change["after"]), after.double(), atol=1e-6)
        assert change["check"]["rule"] == cls and change["check"]["matches"], change["check"]
        settings = event["settings"][change["group"]]
        assert settings["lr"] == pytest.approx(float(kwargs.split("lr=")[1].split(",")[0]))


def test_weight_decay_moves_weights_whose_gradient_is_zero(trace_source):
    cls, kwargs, hook = CONFIGS["sgd-decay-zero-grad"]
    first = steps_of(trace_source(SCRIPT.format(cls=cls, kwargs=kwargs, hook=hook)))[0]
    change = first["params"]["w"]
    assert float(change["grad"]["norm"]) == 0.0
    assert change["check"]["observed_change_norm"] > 0  # weights moved: lr × decay × weights
    assert first["settings"][0]["weight_decay"] == pytest.approx(0.1)
    moved = values(change["after"]) - values(change["before"])
    assert torch.allclose(moved, -0.1 * 0.1 * values(change["before"]), atol=1e-6)


def test_adams_first_step_moves_each_weight_by_about_lr(trace_source):
    """What the page says of Adam: each weight moves by about lr, whatever its gradient's
    scale (the first step divides the gradient by its own size)."""
    code = SCRIPT.format(cls="Adam", kwargs="lr=0.01", hook="")
    change = steps_of(trace_source(code))[0]["params"]["w"]
    moved = (values(change["after"]) - values(change["before"])).abs()
    grad = values(change["grad"]).abs()
    assert grad.max() / grad[grad > 0].min() > 10  # gradients of very different sizes
    assert moved[grad > 1e-6].tolist() == pytest.approx([0.01] * int((grad > 1e-6).sum()),
                                                         rel=1e-3)


@pytest.mark.parametrize(("cls", "kwargs"), [("SGD", "lr=0.1"), ("Adam", "lr=0.01")])
def test_a_step_that_is_not_the_rule_is_said_to_differ(trace_source, cls, kwargs):
    """A hook after the step moves the weights again: the check must say the change is not
    the rule's (a check that cannot fail would prove nothing)."""
    hook = ("_ = None\n"
            "def nudge(optimizer, args, kwargs):\n"
            "    with torch.no_grad():\n"
            "        w.add_(0.5)\n")
    code = SCRIPT.format(cls=cls, kwargs=kwargs, hook=hook).replace(
        "for _ in range(3):", "opt.register_step_post_hook(nudge)\nfor _ in range(3):")
    for step in steps_of(trace_source(code)):  # Adam's second and third from its state too
        check = step["params"]["w"]["check"]
        assert check["matches"] is False
        assert check["largest_difference"] == pytest.approx(0.5, rel=1e-3)


def test_an_optimizer_without_a_rule_here_keeps_its_settings_and_is_not_checked(trace_source):
    code = SCRIPT.format(cls="RMSprop", kwargs="lr=0.01, alpha=0.9", hook="")
    event = steps_of(trace_source(code))[1]
    change = event["params"]["w"]
    assert change["check"] is None
    assert event["settings"][0]["alpha"] == pytest.approx(0.9)
    assert change["state"]["step"] == 1  # the state it read: one step taken before


def test_a_step_that_cannot_be_checked_says_why(trace_source):
    doc = trace_source("""
        import torch
        w = torch.ones(2, requires_grad=True)
        idle = torch.ones(2, requires_grad=True)  # in the optimizer, never given a gradient
        opt = torch.optim.SGD([w, idle], lr=float("nan"))
        (w * w).sum().backward()
        opt.step()
    """)
    (step,) = steps_of(doc)
    assert step["params"]["w"]["check"] == {"rule": "SGD", "unchecked": "cannot_apply"}
    assert step["params"]["idle"]["check"] == {"rule": "SGD", "unchecked": "no_grad"}
    assert step["params"]["idle"]["grad"] is None


def test_a_nan_gradient_steps_to_nan_as_the_rule_says(trace_source):
    (step,) = steps_of(trace_source("""
        import torch
        w = torch.zeros(2, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        (torch.sqrt(w) * 0).sum().backward()
        opt.step()
    """))
    check = step["params"]["w"]["check"]
    assert check["matches"] is True, check  # NaN beside NaN is the rule, not a difference


def test_a_step_with_a_closure_is_not_checked_and_says_why(trace_source):
    """step(closure) computes .grad again inside the step, after the copies were taken: a
    check would compare against the wrong gradient (a review found "✗ differs")."""
    (step,) = steps_of(trace_source("""
        import torch
        w = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([w], lr=0.1)
        (w * 5).sum().backward()  # a stale gradient, replaced by the closure's
        def closure():
            opt.zero_grad()
            loss = (w * 2).sum()
            loss.backward()
            return loss
        opt.step(closure)
    """))
    assert step["params"]["w"]["check"] == {"rule": "SGD", "unchecked": "closure"}


def test_a_low_precision_step_is_held_to_its_own_rounding(trace_source):
    (step,) = steps_of(trace_source("""
        import torch
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(64).to(torch.bfloat16))
        opt = torch.optim.Adam([w], lr=0.01)
        (w.float() * torch.randn(64)).sum().backward()
        opt.step()
    """))
    assert step["params"]["w"]["check"]["matches"] is True
