"""Hooks on the way into `.grad` (issue 24): each change a hook makes is a share of its own, so
the uses and the shares add up to `.grad` as PyTorch computes it. The script prints each
`.grad` itself: that print is the oracle."""

from __future__ import annotations

import pytest
import torch

from tests.trace_facts import backward_events, contribution_sum, diagnostics

HOOKS = """
import torch
from torch import nn
torch.manual_seed(0)
added = torch.randn(3, requires_grad=True)
added.register_hook(lambda g: g + 100)            # line 6: a new tensor
scaled = torch.randn(3, requires_grad=True)
def times_100(g):
    g *= 100                                      # in place
scaled.register_hook(times_100)                   # line 10
inner = torch.randn(3, requires_grad=True)
hidden = inner * 2
hidden.register_hook(lambda g: g * 3)             # a non-leaf's hook: its uses carry it
halved = torch.randn(3, requires_grad=True)
def halve(p):
    p.grad.mul_(0.5)
halved.register_post_accumulate_grad_hook(halve)  # line 17
layer = nn.Linear(3, 3)
x = torch.randn(2, 3, requires_grad=True)
layer.register_full_backward_hook(lambda m, gin, gout: (gin[0] * 10,))  # line 20
out = (added * 2).sum() + (scaled * scaled).sum() + hidden.sum() + (halved * 4).sum()
out = out + layer(x).pow(2).sum()
out.backward()
for t in (added, scaled, inner, halved, layer.weight, x):
    print(t.grad.flatten().tolist())
"""

# the one module is the model: its parameters are named as named_parameters() names them
NAMES = ["added", "scaled", "inner", "halved", "weight", "x"]


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    from app.trace.tracer import trace_script

    path = tmp_path_factory.mktemp("hooks") / "script.py"
    path.write_text(HOOKS)
    return trace_script(path)


def _printed(doc: dict) -> dict[str, torch.Tensor]:
    rows = [eval(line) for line in doc["stdout"].splitlines()]  # noqa: S307 - our own print
    return {name: torch.tensor(row) for name, row in zip(NAMES, rows, strict=True)}


@pytest.mark.parametrize("name", NAMES)
def test_uses_and_hook_shares_add_up_to_what_pytorch_put_in_grad(traced, name):
    assert traced["error"] is None, traced["error"]
    (event,) = backward_events(traced)
    assert contribution_sum(event, name).flatten() == \
        pytest.approx(_printed(traced)[name], rel=1e-5, abs=1e-5)


def test_each_leaf_hook_is_a_share_with_its_line_and_the_uses_are_untouched(traced):
    (event,) = backward_events(traced)
    shares = event["hooks"]
    assert set(shares) == {"added", "scaled", "halved", "x"}  # inner's hook is on a non-leaf
    (added,) = shares["added"]
    assert added["kind"] == "hook" and added["lines"] == [6]
    assert added["grad"]["values"] == [100.0, 100.0, 100.0]
    # the in-place hook: its two uses (scaled * scaled) sent 2 * scaled; the hook made it 100
    # times that
    uses = sum(torch.tensor(u["grad"]["values"]) for u in event["contributions"]["scaled"])
    (scaled,) = shares["scaled"]
    assert scaled["lines"] == [10]
    assert torch.tensor(scaled["grad"]["values"]) == pytest.approx(99 * uses)
    (halved,) = shares["halved"]
    assert halved["kind"] == "post-accumulate-grad hook" and halved["lines"] == [17]
    assert halved["grad"]["values"] == [-2.0, -2.0, -2.0]  # 4 went in, 2 was left
    # the module's full backward hook made its grad_input 10 times what the layer sent: its
    # one use is the layer's own, the hook's share the other 9 times it
    (x_use,) = event["contributions"]["x"]
    (module,) = shares["x"]
    assert module["kind"] == "module backward hook" and module["lines"] == [20]
    assert torch.tensor(module["grad"]["values"]) == \
        pytest.approx(9 * torch.tensor(x_use["grad"]["values"]), rel=1e-5)


def test_what_to_notice_names_the_hook_line_and_the_change(traced):
    found = {d["params"][0]: d["message"] for d in diagnostics(traced, "hook_changed")}
    assert set(found) == {"added", "scaled", "halved", "x"}
    assert "registered at line 6 changed the gradient of `added`" in found["added"]
    assert "full backward hook registered at line 20 changed the gradient of `x`" in found["x"]
    assert "post-accumulate-grad hook registered at line 17" in found["halved"]


def test_a_script_without_leaf_hooks_has_no_shares(trace_source):
    doc = trace_source("import torch\nw = torch.ones(2, requires_grad=True)\n"
                       "h = w * 2\nh.register_hook(lambda g: g * 5)\nh.sum().backward()\n")
    (event,) = backward_events(doc)
    assert "hooks" not in event and not diagnostics(doc, "hook_changed")
    assert contribution_sum(event, "w").tolist() == [10.0, 10.0]


def test_an_optimizer_stepped_from_a_post_accumulate_hook(trace_source):
    """The optimizer-in-backward pattern (PyTorch's tutorial): the hook steps and clears .grad.
    The steps are events after their pass (each its own index, in order), and the hook's share
    takes back what the uses added, so the sum is the .grad torch leaves: none."""
    doc = trace_source("import torch\nw = torch.nn.Parameter(torch.ones(2))\n"
                       "opt = torch.optim.SGD([w], lr=0.1)\n"
                       "def hook(p):\n    opt.step()\n    opt.zero_grad()\n"
                       "w.register_post_accumulate_grad_hook(hook)\n"
                       "(w * 3).sum().backward()\n(w * 2).sum().backward()\n"
                       "print(w.grad, w.tolist())\n")
    assert doc["error"] is None and doc["stdout"].startswith("None")
    assert [(e["kind"], e["index"]) for e in doc["events"]] == \
        [("backward", 0), ("step", 1), ("backward", 2), ("step", 3)]
    for event, sent in zip(backward_events(doc), (3.0, 2.0), strict=True):
        assert values_of(event["contributions"]["w"]) == [sent, sent]
        (share,) = event["hooks"]["w"]
        assert share["kind"] == "post-accumulate-grad hook" and share["lines"] == [7]
        assert contribution_sum(event, "w").tolist() == [0.0, 0.0]  # .grad is None after it


def values_of(uses: list[dict]) -> list[float]:
    return [sum(v) for v in zip(*(u["grad"]["values"] for u in uses), strict=True)]


def test_torchs_own_hook_function_is_not_the_scripts_custom_function(traced):
    """A full backward hook runs through torch's BackwardHookFunction: an op of torch's, not a
    custom Function of the script's to draw as one and gradcheck (a tutorial got "custom
    Function `BackwardHookFunction`: gradcheck passes")."""
    (event,) = backward_events(traced)
    hooks = [n for n in event["graph"]["nodes"] if n["name"] == "BackwardHookFunctionBackward"]
    assert hooks and all(n["kind"] == "op" for n in hooks)
    assert not any("BackwardHookFunction" in d["message"] for d in traced["diagnostics"])


# torch.autograd.grad runs the input leaf's tensor hook on the gradient it returns (and no
# AccumulateGrad): the hook's change is a share of what it returned, and .grad stays None
RETURNED = """
import torch
w = torch.tensor([1.0, 2.0], requires_grad=True)
w.register_hook(lambda g: g * 10)                 # line 4
(got,) = torch.autograd.grad((w * 2 + w * 3).sum(), [w])
"""


def test_autograd_grad_returns_what_the_leafs_hook_made_and_the_share_says_so(trace_source):
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    w.register_hook(lambda g: g * 10)
    (got,) = torch.autograd.grad((w * 2 + w * 3).sum(), [w])
    assert got.tolist() == [50.0, 50.0] and w.grad is None  # 10 × (2 + 3); nothing in .grad

    doc = trace_source(RETURNED)
    (event,) = backward_events(doc)
    assert event["results"][0]["values"] == got.tolist()
    (share,) = event["hooks"]["w"]
    assert share["kind"] == "hook" and share["lines"] == [4]
    # the uses (2 + 3) and the hook's share add up to what PyTorch returned
    assert contribution_sum(event, "w").tolist() == got.tolist()
    assert share["grad"]["values"] == [45.0, 45.0]
    (changed,) = [d["message"] for d in diagnostics(doc, "hook_changed")]
    assert "before torch.autograd.grad returned it" in changed and "`.grad`" not in changed
    (used,) = [d["message"] for d in diagnostics(doc, "multiple_uses")]
    assert used.endswith("the gradient autograd.grad returns is their sum, with the change a "
                         "hook on it made."), used
