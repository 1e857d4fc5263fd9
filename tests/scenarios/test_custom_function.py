"""custom_function: `apply` records one node for a forward that leaves torch, and the engine
calls its backward when it reaches it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.scenarios.helpers import edges, method_source, node_by_id
from tests.trace_facts import backward_events, diagnostics, values

FUNCTION = "NumpyConv2dFunction"


def custom_node(event):
    (node,) = [n for n in event["graph"]["nodes"] if n["kind"] == "custom"]
    return node


def test_apply_recorded_one_custom_node_with_an_edge_from_each_input(traced):
    doc = traced("custom_function")
    (event,) = backward_events(doc)
    node = custom_node(event)
    assert node["function"] == FUNCTION and node["name"] == FUNCTION + "Backward"
    sources = [node_by_id(event, e["source"]) for e in edges(event, target=node["id"])]
    assert {s.get("param") for s in sources} == {"image", "filter", "bias"}
    assert all(s["name"] == "AccumulateGrad" for s in sources)
    # nothing inside forward was recorded: the only nodes are the loss's, the custom one and
    # the three AccumulateGrad nodes
    ops = [n for n in event["graph"]["nodes"] if n["kind"] == "op"]
    assert all(n["line"] != node["line"] for n in ops)


def test_the_engine_calls_backward_when_it_reaches_the_node(traced):
    event = backward_events(traced("custom_function"))[0]
    node = custom_node(event)
    order = event["order"]
    leaves = [n["id"] for n in event["graph"]["nodes"] if n["kind"] in ("param", "leaf")]
    assert node["id"] in order
    assert all(order.index(node["id"]) < order.index(leaf) for leaf in leaves)
    line, source = method_source("custom_function", FUNCTION, "backward")
    assert node["backward_source"]["file"] == "<script>"
    assert node["backward_source"]["line"] == line
    assert source in node["backward_source"]["source"]


def test_gradcheck_passes(traced):
    doc = traced("custom_function")
    node = custom_node(backward_events(doc)[0])
    assert node["gradcheck"]["passed"] is True
    (diag,) = diagnostics(doc, "gradcheck_passed")
    assert node["id"] in diag["nodes"]
    assert not diagnostics(doc, "gradcheck_failed")


def test_numpy_backward_gives_what_torch_conv2d_gives(traced, plain):
    """torch's conv2d is a cross-correlation too: its autograd gradients must match."""
    doc = traced("custom_function")
    ns = plain("custom_function")
    image, module, target = ns["image"], ns["module"], ns["target"]
    leaves = [t.detach().clone().double().requires_grad_()
              for t in (image, module.filter, module.bias)]
    i, f, b = leaves
    out = F.conv2d(i[None, None], f[None, None], b)[0, 0]
    grads = torch.autograd.grad((out - target.double()).pow(2).mean(), leaves)
    for name, expected in zip(("image", "filter", "bias"), grads, strict=True):
        assert torch.allclose(values(doc["params"][name]["grad"]), expected, atol=1e-5), name


def test_a_script_that_calls_gradcheck_has_its_backward_and_one_pass_for_the_check(trace_source):
    """torch's many passes inside gradcheck are not events; the check is one (its
    representative pass, app/trace/gradcheck_events.py)."""
    doc = trace_source("""
        import torch
        x = torch.randn(3, dtype=torch.double, requires_grad=True)
        torch.sin(x).sum().backward()
        print(torch.autograd.gradcheck(torch.sin, (x,)))
    """)
    assert doc["error"] is None
    own, check = backward_events(doc)
    assert "gradcheck" not in own and check["gradcheck"]["function"] == "torch.sin"
