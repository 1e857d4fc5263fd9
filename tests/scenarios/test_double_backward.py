"""double_backward: with create_graph the gradient has a graph of its own, and backward through
it gives second derivatives; without it, the second backward fails."""

from __future__ import annotations

import torch

from tests.trace_facts import backward_events, diagnostics, param_node, values


def f(x):
    return x.pow(3).sum()  # the scenario's y


def test_first_backward_returns_the_gradient_and_leaves_grad_alone(traced, plain):
    first = backward_events(traced("double_backward", "--variant", "create_graph"))[0]
    x = plain("double_backward", "--variant", "create_graph")["x"].detach().double()
    assert first["call"] == "torch.autograd.grad"
    expected = torch.autograd.functional.jacobian(f, x)
    assert torch.allclose(values(first["results"][0]), expected)
    assert first["grads"]["x"]["after"] is None  # autograd.grad returns, it does not accumulate


def test_create_graph_records_a_second_order_graph_whose_backward_gives_second_derivatives(
        traced, plain):
    doc = traced("double_backward", "--variant", "create_graph")
    first, second = backward_events(doc)
    assert second["error"] is None
    # the second graph is made of nodes the first backward recorded, at the autograd.grad line
    made_by_first = [n for n in second["graph"]["nodes"]
                     if n["kind"] == "op" and n["line"] == first["line"]]
    names = {n["name"] for n in made_by_first}
    assert "PowBackward0" in names and any(n.startswith("MulBackward") for n in names)
    assert all(n["line"] != first["line"] for n in first["graph"]["nodes"] if n["kind"] == "op")
    assert param_node(second, "x") is not None  # ...and it reaches back to x
    x = plain("double_backward", "--variant", "create_graph")["x"].detach().double()
    hessian = torch.autograd.functional.hessian(f, x)
    assert torch.allclose(values(doc["params"]["x"]["grad"]), hessian.sum(0))


def test_without_create_graph_the_gradient_has_no_graph_and_backward_fails(traced, plain):
    doc = traced("double_backward", "--variant", "no_create_graph")
    first, second = backward_events(doc)
    assert first["error"] is None
    assert second["error"] and "does not require grad" in second["error"]["message"]
    assert param_node(second, "x") is None
    assert diagnostics(doc, "output_without_grad_fn")
    assert doc["params"]["x"]["grad"] is None
    assert plain("double_backward", "--variant", "no_create_graph")["dy_dx"].grad_fn is None
