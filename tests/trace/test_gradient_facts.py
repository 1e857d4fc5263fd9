"""What the Trace says about gradients, checked against what PyTorch computes."""

from __future__ import annotations

import jsonschema
import pytest
import torch

from app.format import load_schema
from tests.trace_facts import (
    backward_events,
    contribution_sum,
    diagnostics,
    param_node,
    step_events,
    values,
)

REUSED = """
import sys
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.middle_linear = nn.Linear(4, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, x, k):
        h = torch.tanh(self.inp(x))
        for _ in range(k):
            h = torch.tanh(self.middle_linear(h))
        return self.out(h)

torch.manual_seed(0)
model = Net()
x = torch.randn(5, 3)
loss = model(x, int(sys.argv[1])).pow(2).mean()
loss.backward()
"""


def independent_middle_grad(k: int) -> torch.Tensor | None:
    """The same computation, done here with plain torch.autograd.grad."""
    from torch import nn

    torch.manual_seed(0)
    inp, mid, out = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 1)
    x = torch.randn(5, 3)
    h = torch.tanh(inp(x))
    for _ in range(k):
        h = torch.tanh(mid(h))
    loss = out(h).pow(2).mean()
    if k == 0:
        return None
    return torch.autograd.grad(loss, mid.weight)[0].double()


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_reused_layer_uses_sum_to_grad(trace_source, k):
    doc = trace_source(REUSED, argv=[str(k)])
    assert doc["error"] is None
    jsonschema.validate(doc, load_schema())
    (event,) = backward_events(doc)
    name = "middle_linear.weight"
    assert event["uses"].get(name, 0) == k
    assert doc["params"][name]["uses"] == {"0": k}
    after = event["grads"][name]["after"]
    expected = independent_middle_grad(k)
    if k == 0:
        assert after is None
        assert name not in event["contributions"]
        assert param_node(event, name) is None
        flagged = {p for d in diagnostics(doc, "no_gradient") for p in d["params"]}
        assert flagged == {"middle_linear.weight", "middle_linear.bias"}
        return
    uses = event["contributions"][name]
    assert len(uses) == k
    assert len({u["node"] for u in uses}) == k  # k different consuming nodes
    assert torch.allclose(contribution_sum(event, name), values(after), atol=1e-6)
    assert torch.allclose(values(after), expected, atol=1e-6)
    if k > 1:  # the uses really differ: .grad is a sum, not k copies of one term
        first, second = (values(u["grad"]) for u in uses[:2])
        assert not torch.allclose(first, second)


def test_order_is_a_valid_execution_order(trace_source):
    doc = trace_source(REUSED, argv=["3"])
    (event,) = backward_events(doc)
    order = event["order"]
    position = {node: i for i, node in enumerate(order)}
    assert len(position) == len(order)  # each node runs once
    assert order[0] == event["graph"]["roots"][0]
    graph_nodes = {n["id"] for n in event["graph"]["nodes"] if n["kind"] != "output"}
    assert set(order) == graph_nodes  # loss.backward() runs every node
    checked = 0
    for e in event["graph"]["edges"]:
        if e["source"] in position and e["target"] in position:
            # the target sends gradient to the source: it must have run first
            assert position[e["target"]] < position[e["source"]], e
            checked += 1
    assert checked == len([e for e in event["graph"]["edges"] if e["target"] in position])


def test_edges_carry_the_gradient_that_flowed(trace_source):
    doc = trace_source(REUSED, argv=["2"])
    (event,) = backward_events(doc)
    into_weight = [e for e in event["graph"]["edges"]
                   if e["source"] == param_node(event, "middle_linear.weight")["id"]]
    norms = sorted(e["grad_norm"] for e in into_weight)
    contributions = sorted(values(u["grad"]).norm().item()
                           for u in event["contributions"]["middle_linear.weight"])
    assert norms == pytest.approx(contributions)


ACCUMULATE = """
import torch
from torch import nn
torch.manual_seed(1)
layer = nn.Linear(3, 2)
opt = torch.optim.SGD(layer.parameters(), lr=0.05)
x = torch.randn(4, 3)
layer(x).sum().backward()
layer(x).sum().backward()   # no zero_grad: .grad adds up
opt.step()
"""


def test_two_backwards_without_zero_grad_double_the_grad(trace_source):
    doc = trace_source(ACCUMULATE)
    first, second = backward_events(doc)
    for name in ("weight", "bias"):
        g1 = values(first["grads"][name]["after"])
        assert first["grads"][name]["before"] is None
        assert torch.allclose(values(second["grads"][name]["before"]), g1)
        assert torch.allclose(values(second["grads"][name]["after"]), 2 * g1)


def test_sgd_step_moves_weights_by_minus_lr_grad(trace_source):
    doc = trace_source(ACCUMULATE)
    (step,) = step_events(doc)
    assert step["optimizer"] == "SGD" and step["lr"] == [0.05]
    (_, second) = backward_events(doc)
    for name, rec in step["params"].items():
        before, after = values(rec["before"]), values(rec["after"])
        grad = values(second["grads"][name]["after"])
        assert torch.allclose(values(rec["grad"]), grad)
        assert torch.allclose(after, before - 0.05 * grad)
        assert not torch.allclose(after, before)


DATA_ONLY = """
import torch
from torch import nn
torch.manual_seed(0)
used = nn.Parameter(torch.randn(3))
hidden = nn.Parameter(torch.randn(3))
x = torch.randn(3)
y = (used * x + hidden.data * x).sum()   # hidden is read through .data: no link to the graph
y.backward()
print(hidden.grad)
"""


def test_parameter_used_only_through_data_gets_none_and_a_diagnostic(trace_source):
    doc = trace_source(DATA_ONLY)
    assert doc["error"] is None
    assert doc["stdout"].strip() == "None"  # what PyTorch itself says
    (event,) = backward_events(doc)
    assert event["grads"]["hidden"]["after"] is None
    assert event["grads"]["used"]["after"] is not None
    (diag,) = diagnostics(doc, "no_gradient")
    assert diag["params"] == ["hidden"]
    assert "`.data`" in diag["message"] and "line 8" in diag["message"]


TEMPLATE_LAYER = """
import torch
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
loss = model(torch.randn(2, 3, 8)).pow(2).sum()
loss.backward()
print(layer.linear1.weight.grad is None, model.layers[0].linear1.weight.grad is None,
      model.layers[1].linear1.weight.grad is None)
"""


def test_a_template_layer_that_is_only_copied_is_said_as_such_not_as_a_data_read(trace_source):
    """nn.TransformerEncoder deep-copies the layer it is given (copy.deepcopy reads each
    parameter's .data): the template never trains, its copies do, and the script has no .data
    (issue 21: 12 warnings blamed a `.data` read on line 6 of a 48-layer encoder)."""
    doc = trace_source(TEMPLATE_LAYER)
    assert doc["error"] is None
    assert doc["stdout"].split() == ["True", "False", "False"]  # what PyTorch itself says
    (event,) = backward_events(doc)
    template = sorted(n for n in doc["params"] if n.startswith("layer."))
    assert len(template) == 12
    assert all(event["grads"][n]["after"] is None for n in template)
    (diag,) = diagnostics(doc, "no_gradient")  # one finding for the template, not twelve
    assert diag["params"] == template
    assert "`.data`" not in diag["message"]
    assert "`layer` is the template that line 6 copies" in diag["message"]
    assert "never called itself" in diag["message"]
    assert "the copies in `model.layers.N` are what train" in diag["message"]
    # the parameters that train head the table; the template's come last, together
    assert list(doc["params"])[-12:] == [n for n in doc["params"] if n.startswith("layer.")]
    assert list(doc["params"])[0].startswith("model.layers.0.")


UNUSED_COPY = """
import copy
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Linear(3, 2)
spare = nn.Linear(3, 2)
kept = copy.deepcopy(spare)      # neither spare nor its copy is ever called
net(torch.randn(4, 3)).sum().backward()
"""


def test_a_copied_module_whose_copies_do_not_train_either_is_not_said_to_train(trace_source):
    doc = trace_source(UNUSED_COPY)
    (diag,) = [d for d in diagnostics(doc, "no_gradient") if "spare.weight" in d["params"]]
    assert diag["params"] == ["spare.bias", "spare.weight"]
    assert "are what train" not in diag["message"]
    assert "without any copy receiving a gradient" in diag["message"]


CUSTOM_SCIPY = '''
import numpy as np
import torch
from scipy.signal import correlate2d, convolve2d

class ScipyCorrelate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, filt):
        ctx.save_for_backward(x, filt)
        out = correlate2d(x.detach().numpy(), filt.detach().numpy(), mode="valid")
        return torch.as_tensor(out, dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, filt = ctx.saved_tensors
        g = grad_out.numpy()
        grad_x = convolve2d(g, filt.numpy(), mode="full")
        grad_f = correlate2d(x.numpy(), g, mode="valid")
        return torch.as_tensor(grad_x), torch.as_tensor(grad_f)

torch.manual_seed(0)
x = torch.randn(6, 6, requires_grad=True)
filt = torch.randn(3, 3, requires_grad=True)
ScipyCorrelate.apply(x, filt).pow(2).sum().backward()
'''


def test_custom_function_leaving_torch_gets_its_own_node(trace_source):
    doc = trace_source(CUSTOM_SCIPY)
    assert doc["error"] is None
    (event,) = backward_events(doc)
    (node,) = [n for n in event["graph"]["nodes"] if n["kind"] == "custom"]
    assert node["name"] == "ScipyCorrelateBackward"
    assert node["function"] == "ScipyCorrelate"
    src = node["backward_source"]
    assert src["file"] == "<script>" and src["line"] == 13
    assert "convolve2d(g, filt.numpy()" in src["source"]
    assert node["line"] == 24  # where apply was called
    assert [s["shape"] for s in node["saved"]] == [[6, 6], [3, 3]]
    # its inputs are the two leaves' gradient edges
    sources = {e["source"] for e in event["graph"]["edges"] if e["target"] == node["id"]}
    assert {n["param"] for n in event["graph"]["nodes"] if n["id"] in sources} == {"x", "filt"}
    assert node["id"] in event["order"]
    assert node["gradcheck"]["passed"] is True


def test_a_reused_parameter_is_reported_once_for_a_whole_loop(trace_source):
    doc = trace_source("""
        import torch
        w = torch.ones(2, requires_grad=True)
        for _ in range(4):
            (w * w).sum().backward()
    """)
    (diag,) = diagnostics(doc, "multiple_uses")
    assert diag["params"] == ["w"] and diag["event"] == 0
    assert "used 2 times in backward #0 (and in 3 more backward passes)" in diag["message"]


FORWARD_ORDER = """
import torch
w = torch.ones(2, requires_grad=True)
first = w * 1.0
second = w * 2.0
third = w * 3.0
(third + first + second).sum().backward()
"""


def test_uses_are_numbered_in_forward_order(trace_source):
    """Use 1 is the first application in the forward pass: here w is scaled by 1, 2 and 3 in
    that order, so its uses send 1, 2 and 3 per entry (the engine runs them the other way)."""
    doc = trace_source(FORWARD_ORDER)
    (event,) = backward_events(doc)
    uses = event["contributions"]["w"]
    assert [values(u["grad"]).tolist() for u in uses] == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    lines = {n["id"]: n.get("line") for n in event["graph"]["nodes"]}
    assert [lines[u["node"]] for u in uses] == [4, 5, 6]


GRAD_AFTER_BACKWARD = """
import torch
x = torch.ones(3, requires_grad=True)
(x * 2).sum().backward()               # x.grad = 2
y = (x * x * 3).sum()
(g,) = torch.autograd.grad(y, x)       # 6 per entry, returned; x.grad stays 2
print([g.tolist(), x.grad.tolist()])
"""


def test_autograd_grad_uses_add_up_to_what_it_returned_not_to_grad(trace_source):
    """Issue 24: a physics-informed network's collocation points already had a .grad; the
    event paired its uses with .grad, which autograd.grad never changes."""
    doc = trace_source(GRAD_AFTER_BACKWARD)
    returned, grad = (torch.tensor(v) for v in eval(doc["stdout"]))  # noqa: S307 - our print
    event = backward_events(doc)[1]
    assert event["call"] == "torch.autograd.grad" and event["inputs"] == ["x"]
    assert contribution_sum(event, "x").tolist() == returned.tolist() == [6.0, 6.0, 6.0]
    assert values(event["results"][0]).tolist() == returned.tolist()
    assert values(event["grads"]["x"]["after"]).tolist() == grad.tolist() == [2.0, 2.0, 2.0]
