"""reused_layer: k uses of one weight, k contributions, one .grad, one optimizer step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.scenarios.helpers import flagged
from tests.trace_facts import backward_events, contribution_sum, param_node, step_events, values

NAME = "middle_linear.weight"


def per_use_gradients(plain, k: int) -> list[torch.Tensor]:
    """Each use's own gradient, computed here: every use gets its own copy of the weight."""
    ns = plain("reused_layer", "--k", str(k))
    torch.manual_seed(0)  # the script's seed, model and data, before its optimizer step
    model = ns["DynamicNet"]()
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    assert torch.equal(x, ns["x"]) and torch.equal(y, ns["y"])
    copies = [model.middle_linear.weight.detach().clone().requires_grad_() for _ in range(k)]
    h = model.input_linear(x).clamp(min=0)
    for w in copies:
        h = F.linear(h, w, model.middle_linear.bias).clamp(min=0)
    loss = F.mse_loss(model.output_linear(h), y)
    return [g.double() for g in torch.autograd.grad(loss, copies)] if k else []


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_each_use_contributes_its_own_term_and_grad_is_their_sum(traced, plain, k):
    doc = traced("reused_layer", "--k", str(k))
    (event,) = backward_events(doc)
    assert event["uses"].get(NAME, 0) == k
    assert doc["params"][NAME]["uses"] == {"0": k}
    after = event["grads"][NAME]["after"]
    if k == 0:  # the layer is never used: no node, no gradient, and a diagnostic says so
        assert after is None and param_node(event, NAME) is None
        assert NAME in flagged(doc, "no_gradient")
        return
    uses = event["contributions"][NAME]
    assert len(uses) == k and len({u["node"] for u in uses}) == k
    assert torch.allclose(contribution_sum(event, NAME), values(after), atol=1e-6)
    # each recorded term is one use's gradient, numbered as the forward pass made them (the
    # engine meets the last use first)
    expected = per_use_gradients(plain, k)
    for use, grad in zip(uses, expected, strict=True):
        assert torch.allclose(values(use["grad"]), grad, atol=1e-6)
    if k > 1:
        assert not torch.allclose(expected[0], expected[1])  # k different terms, not k copies
        assert NAME in flagged(doc, "multiple_uses")


@pytest.mark.parametrize("k", [1, 3])
def test_the_step_moves_the_weight_once_by_lr_times_the_summed_gradient(traced, k):
    doc = traced("reused_layer", "--k", str(k))
    (event,) = backward_events(doc)
    (step,) = step_events(doc)
    assert step["optimizer"] == "SGD"
    (lr,) = step["lr"]
    record = step["params"][NAME]
    grad = values(event["grads"][NAME]["after"])
    assert torch.allclose(values(record["grad"]), grad)
    moved = values(record["after"]) - values(record["before"])
    assert torch.allclose(moved, -lr * grad, atol=1e-6)
    if k > 1:  # once by the sum, not once per use
        assert not torch.allclose(moved, -lr * k * grad, atol=1e-6)


def test_the_scenarios_class_question_has_the_answer_the_run_shows(traced):
    """CLASS_QUESTION's answer is what the run records: with k = 3 the optimizer moves the
    weight in exactly one step, although the weight was used three times."""
    from app.catalog import load_catalog
    from tests.conftest import SCENARIOS

    q = load_catalog(SCENARIOS)["reused_layer"].class_question
    doc = traced("reused_layer", "--k", "3")
    moved = [e for e in step_events(doc)
             if not torch.equal(values(e["params"]["middle_linear.weight"]["before"]),
                                values(e["params"]["middle_linear.weight"]["after"]))]
    assert int(q["choices"][q["answer"]]) == len(moved) == 1
