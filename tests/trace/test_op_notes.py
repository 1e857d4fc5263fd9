"""The one-line notes on what a node's backward does (static/js/op_notes.js), each checked
against PyTorch: the node is made with torch, its backward's name is the note's key, and what
the sentence says (ties shared or not, the gradient at exactly 0, repeats summed) is what
torch does. A note without a check here fails the test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

NOTES = Path(__file__).resolve().parents[2] / "static" / "js" / "op_notes.js"


def notes() -> dict[str, str]:
    text = NOTES.read_text()
    block = text[text.index("export const OP_NOTES = {"):text.index("};")]
    return dict(re.findall(r'^\s+(\w+): "(.*)",$', block, re.M))


def leaf(*values: float) -> torch.Tensor:
    return torch.tensor(values, requires_grad=True)


def grad_of(y: torch.Tensor, x: torch.Tensor, weights=None) -> list[float]:
    (y * (torch.ones_like(y) if weights is None else torch.tensor(weights))).sum().backward()
    return x.grad.tolist()


def node(y: torch.Tensor) -> str:
    return type(y.grad_fn).__name__


def relu():
    x = leaf(-1.0, 0.0, 2.0)
    y = torch.relu(x)
    return node(y), grad_of(y, x) == [0.0, 0.0, 1.0]  # 0 at exactly 0


def clamp():
    x = leaf(-1.0, 0.0, 1.0, 2.0)
    y = x.clamp(min=0, max=1)
    return node(y), grad_of(y, x) == [0.0, 1.0, 1.0, 0.0]  # both bounds pass it, clipped get 0


def abs_():
    x = leaf(-1.0, 0.0, 2.0)
    y = x.abs()
    return node(y), grad_of(y, x) == [-1.0, 0.0, 1.0]


def max_all():
    x = leaf(1.0, 3.0, 3.0)
    y = x.max()
    return node(y), grad_of(y, x) == [0.0, 0.5, 0.5]  # ties share equally


def min_all():
    x = leaf(1.0, 1.0, 3.0)
    y = x.min()
    return node(y), grad_of(y, x) == [0.5, 0.5, 0.0]


def amax():
    x = leaf(1.0, 3.0, 3.0)
    y = x.amax()
    return node(y), grad_of(y, x) == [0.0, 0.5, 0.5]


def amin():
    x = leaf(1.0, 1.0, 3.0)
    y = x.amin()
    return node(y), grad_of(y, x) == [0.5, 0.5, 0.0]


def max_dim():
    x = torch.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
    values, index = x.max(dim=1)
    expected = [[1.0 if i == int(index) else 0.0 for i in range(3)]]
    return node(values), grad_of(values, x) == expected  # only the returned tie


def min_dim():
    x = torch.tensor([[1.0, 1.0, 3.0]], requires_grad=True)
    values, index = x.min(dim=1)
    expected = [[1.0 if i == int(index) else 0.0 for i in range(3)]]
    return node(values), grad_of(values, x) == expected


def where():
    a, b = leaf(1.0, 2.0), leaf(3.0, 4.0)
    condition = torch.tensor([True, False])
    y = torch.where(condition, a, b)
    y.sum().backward()
    taken = a.grad.tolist() == [1.0, 0.0] and b.grad.tolist() == [0.0, 1.0] \
        and not condition.requires_grad
    # the note's warning, as it says: the 0 sent into sqrt's backward at x = 0 becomes NaN
    x = leaf(0.0, 4.0)
    torch.where(x > 0, torch.sqrt(x), torch.zeros(2)).sum().backward()
    nan_at_zero = torch.isnan(x.grad[0]).item() and x.grad[1].item() == 0.25
    return node(y), taken and nan_at_zero


def index():
    x = leaf(1.0, 2.0, 3.0)
    y = x[torch.tensor([0, 0, 2])]
    return node(y), grad_of(y, x) == [2.0, 0.0, 1.0]  # read twice: the sum


def gather():
    x = leaf(1.0, 2.0, 3.0)
    y = torch.gather(x, 0, torch.tensor([1, 1]))
    return node(y), grad_of(y, x) == [0.0, 2.0, 0.0]


def sort():
    x = leaf(3.0, 1.0, 2.0)
    y = x.sort().values
    return node(y), grad_of(y, x, [10.0, 20.0, 30.0]) == [30.0, 10.0, 20.0]


def topk():
    x = leaf(3.0, 1.0, 2.0)
    y = x.topk(2).values
    return node(y), grad_of(y, x, [10.0, 20.0]) == [10.0, 0.0, 20.0]


def accumulate():
    w = leaf(1.0, 2.0)
    y = w * 3
    accumulate_grad = y.grad_fn.next_functions[0][0]
    (w * 3).sum().backward()  # .grad was None: set
    first = w.grad.tolist()
    y.sum().backward()  # then added to
    return type(accumulate_grad).__name__, first == [3.0, 3.0] and w.grad.tolist() == [6.0, 6.0]


def to_copy():
    """autocast's cast: a float32 weight used in bfloat16; its gradient arrives as float32,
    equal to the bfloat16 gradient of the cast value, cast back."""
    w = leaf(1.5, -2.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = w.to(torch.bfloat16)
    seen = {}
    cast.register_hook(lambda g: seen.setdefault("bf16", g))
    (cast * torch.tensor([3.0, 5.0], dtype=torch.bfloat16)).sum().backward()
    widened_exactly = (seen["bf16"].dtype == torch.bfloat16 and w.grad.dtype == torch.float32
                       and w.grad.tolist() == seen["bf16"].float().tolist() == [3.0, 5.0])
    # "rounded where that dtype is narrower": a float16 input cast up to float32 gets its
    # float32 gradient rounded to float16 (1.0001 is not a float16 number; 1.0 is the nearest)
    h = torch.ones(1, dtype=torch.float16, requires_grad=True)
    h.float().backward(torch.tensor([1.0001]))
    rounded = h.grad.dtype == torch.float16 and h.grad.item() == 1.0 != 1.0001
    return node(cast), widened_exactly and rounded


CHECKS = {"ToCopyBackward0": to_copy,
          "ReluBackward0": relu, "ClampBackward1": clamp, "AbsBackward0": abs_,
          "MaxBackward1": max_all, "MinBackward1": min_all, "AmaxBackward0": amax,
          "AminBackward0": amin, "MaxBackward0": max_dim, "MinBackward0": min_dim,
          "WhereBackward0": where, "IndexBackward0": index, "GatherBackward0": gather,
          "SortBackward0": sort, "TopkBackward0": topk, "AccumulateGrad": accumulate}


def test_every_note_has_its_check_against_pytorch():
    assert set(notes()) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_note_says_what_pytorch_does(name):
    made, holds = CHECKS[name]()
    assert made == name, f"torch names this node {made}, not {name}"
    assert holds, notes()[name]


def test_a_named_non_leaf_keeps_no_grad_unless_retained():
    w = leaf(1.0, 2.0)
    h = w * 2
    kept = w * 2
    kept.retain_grad()
    ((h * h).sum() + (kept * kept).sum()).backward()
    assert not h.is_leaf and h.grad is None and kept.grad is not None


def leaf_note(name: str) -> str:
    """One of op_notes.js's sentences for a leaf whose AccumulateGrad adds nothing."""
    found = re.search(rf'^export const {name} = "(.*)";$', NOTES.read_text(), re.M)
    assert found, f"op_notes.js has no {name}"
    return found.group(1)


def test_autograd_grad_runs_no_accumulate_grad_and_leaves_grad_alone():
    assert "leaves .grad as it was" in leaf_note("LEAF_IN_AUTOGRAD_GRAD")
    w, x = leaf(1.0, 2.0), leaf(3.0, 4.0)
    ran = []
    w.register_post_accumulate_grad_hook(lambda p: ran.append(p))  # runs where AccumulateGrad does
    (got,) = torch.autograd.grad((w * x).sum(), [w])
    assert got.tolist() == [3.0, 4.0]  # returned: the gradient that reached w
    assert w.grad is None and x.grad is None and not ran  # nothing accumulated, for either
    w.grad = torch.tensor([7.0, 7.0])
    torch.autograd.grad((w * x).sum(), [w])
    assert w.grad.tolist() == [7.0, 7.0]  # a .grad it held is left as it was


def test_a_leaf_switched_off_after_the_forward_drops_what_arrives():
    assert "drops the gradient that arrives" in leaf_note("LEAF_DROPPED")
    w = leaf(1.0, 2.0)
    w.grad = torch.tensor([7.0, 7.0])
    y = (w * 3).sum()
    w.requires_grad_(False)
    y.backward()
    assert w.grad.tolist() == [7.0, 7.0]
