"""Scripts written the way PyTorch's tutorials and common example repositories write them,
traced unchanged (issue 12). Each: no error, the right number of backward and step events,
contributions that sum to `.grad`, and its figures, make_dot views and notes.

The hook-based gradient-flow plot is in test_figures.py; torch.func per-sample gradients in
test_not_drawn.py; the double-backward tutorial's custom Functions in test_views.py.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.trace_facts import (
    backward_events,
    contribution_sum,
    diagnostics,
    step_events,
    values,
)

MOMENTUM_OVER_TWO_MODELS = """
import matplotlib.pyplot as plt
import torch
from torch import nn

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
head = nn.Linear(8, 1)
optimizer = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()),
                            lr=0.1, momentum=0.9)
x, y = torch.randn(16, 4), torch.randn(16, 1)
losses = []
for epoch in range(3):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(head(encoder(x)), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
plt.plot(losses)
plt.savefig("loss.png")
"""


def test_momentum_sgd_over_two_models(trace_source, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # savefig writes loss.png here
    doc = trace_source(MOMENTUM_OVER_TWO_MODELS)
    assert doc["error"] is None, doc["error"]
    backward, steps = backward_events(doc), step_events(doc)
    assert len(backward) == 3 and len(steps) == 3
    assert [e["kind"] for e in doc["events"]] == ["backward", "step"] * 3
    # each pass's contributions sum to what it added to .grad (zeroed before each pass)
    for ev in backward:
        for name, change in ev["grads"].items():
            if name in ev["contributions"]:
                assert torch.allclose(contribution_sum(ev, name), values(change["after"]),
                                      atol=1e-6), (ev["index"], name)
    # one optimizer over both models: every parameter of both is in each step
    names = ["encoder.0.weight", "encoder.0.bias", "head.weight", "head.bias"]
    assert list(steps[0]["params"]) == names
    # the weights the steps recorded are the ones PyTorch computes for the same training
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    head = nn.Linear(8, 1)
    params = list(encoder.parameters()) + list(head.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.mse_loss(head(encoder(x)), y).backward()
        optimizer.step()
    for name, p in zip(names, params, strict=True):
        assert torch.allclose(values(steps[-1]["params"][name]["after"]), p.detach().double(),
                              atol=1e-6), name
    # the plot of the losses is kept, with the line that saved it
    assert [(f["via"], f["line"]) for f in doc["figures"]] == [("savefig", 20)]


SPLIT_FUNCTION = """
import torch

class SplitScale(torch.autograd.Function):
    \"\"\"Two outputs: x * w and x / w.\"\"\"
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w, x / w

    @staticmethod
    def backward(ctx, g_mul, g_div):
        x, w = ctx.saved_tensors
        grad_x = g_mul * w + g_div / w
        grad_w = (g_mul * x - g_div * x / w ** 2).sum(0)
        return grad_x, grad_w

torch.manual_seed(0)
x = torch.randn(5, 3, requires_grad=True)
w = torch.rand(3, requires_grad=True)
a, b = SplitScale.apply(x, w)
loss = (a.tanh() + b.sigmoid()).sum()
loss.backward()
"""


def test_a_custom_function_with_two_outputs(trace_source):
    doc = trace_source(SPLIT_FUNCTION)
    assert doc["error"] is None, doc["error"]
    [ev] = backward_events(doc)
    assert not step_events(doc)
    [custom] = [n for n in ev["graph"]["nodes"] if n["kind"] == "custom"]
    assert custom["function"] == "SplitScale"
    # both outputs feed the loss: two edges leave the one node
    consumers = [e for e in ev["graph"]["edges"] if e["source"] == custom["id"]]
    assert len(consumers) == 2
    assert custom["gradcheck"]["passed"] is True
    assert diagnostics(doc, "gradcheck_passed")
    for name in ("x", "w"):
        assert torch.allclose(contribution_sum(ev, name), values(doc["params"][name]["grad"]),
                              atol=1e-6), name
    # the same gradients PyTorch's own ops give
    torch.manual_seed(0)
    x = torch.randn(5, 3, requires_grad=True)
    w = torch.rand(3, requires_grad=True)
    ((x * w).tanh() + (x / w).sigmoid()).sum().backward()
    assert torch.allclose(values(doc["params"]["w"]["grad"]), w.grad.double(), atol=1e-5)


DOUBLE_BACKWARD_TUTORIAL = """
import torch
import torchviz

x = torch.tensor(1., requires_grad=True)
y = x ** 3
grad_x, = torch.autograd.grad(y, x, create_graph=True)
torchviz.make_dot((grad_x, x, y), params={"grad_x": grad_x, "x": x, "y": y})
grad_x.backward()
print(x.grad)
"""


def test_the_double_backward_tutorial(trace_source):
    doc = trace_source(DOUBLE_BACKWARD_TUTORIAL)
    assert doc["error"] is None, doc["error"]
    first, second = backward_events(doc)
    assert first["call"] == "torch.autograd.grad" and first["create_graph"] is True
    assert second["call"] == "Tensor.backward" and "create_graph" not in second
    # d²(x³)/dx² at 1 is 6: PyTorch's answer, and what the second pass left in x.grad
    assert doc["stdout"].strip() == "tensor(6.)"
    assert values(doc["params"]["x"]["grad"]).item() == 6.0
    assert torch.allclose(contribution_sum(second, "x"), torch.tensor(6.0, dtype=torch.float64))
    # the gradient's own graph is a view, and the second pass walks that very graph
    gradient = doc["views"][first["gradient_view"]]
    ops = sorted(n["name"] for n in gradient["graph"]["nodes"] if n["kind"] == "op")
    assert ops == sorted(n["name"] for n in second["graph"]["nodes"] if n["kind"] == "op")
    assert len(ops) >= 2
    make_dot = next(v for v in doc["views"] if v["kind"] == "make_dot")
    assert make_dot["line"] == 8 and make_dot["names"] == ["grad_x", "x", "y"]
    assert not diagnostics(doc, "gradient_graph_cut")
