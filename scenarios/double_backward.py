"""Differentiating a gradient: create_graph and the second-order graph

Question: I compute a gradient with `torch.autograd.grad` and then want to differentiate
something made from it (a gradient penalty, a Hessian-vector product, a second derivative).
Why does the second backward fail unless I pass `create_graph=True`?

Answer: a backward pass normally computes gradients as plain numbers: no graph is recorded
while it runs, so the gradient it returns has no `grad_fn` and cannot be differentiated.
`create_graph=True` makes the backward pass record its own operations, so the returned gradient
comes with a graph of its own (the second-order graph), which reaches back to `x` through the
values the first graph saved. Backward through it gives second derivatives.

What to look at: backward #0 is `torch.autograd.grad` on y = sum(x³): its result is 3x². With
create_graph, backward #1 runs on the sum of that gradient; its graph is made of the nodes the
first backward recorded (multiplications by 3 and by x², a pow), and x.grad = 6x, the diagonal
of the Hessian. Without create_graph the gradient has no grad_fn, and backward #1 fails.
"""

import argparse

import torch

VARIANTS = {
    "create_graph": "autograd.grad(..., create_graph=True): the gradient can be differentiated",
    "no_create_graph": "without create_graph: the gradient has no grad_fn, backward fails",
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

x = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
y = x.pow(3).sum()

(dy_dx,) = torch.autograd.grad(y, x, create_graph=args.variant == "create_graph")
print("dy/dx = 3x² =", dy_dx.tolist(), "| has a grad_fn:", dy_dx.grad_fn is not None)
try:
    dy_dx.sum().backward()  # differentiate the gradient: second derivatives
    print("x.grad = 6x =", x.grad.tolist())
except RuntimeError as error:
    print("second backward failed:", error)
