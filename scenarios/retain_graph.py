"""A second backward through the same graph: retain_graph

Question: I call `backward()` twice on the same loss (say, two losses share part of a graph)
and the second call fails with "Trying to backward through the graph a second time". What was
freed, and what does `retain_graph=True` change?

Answer: to save memory, the first backward frees the tensors that the graph's nodes saved for
the backward pass (the inputs of a multiplication, the output of tanh...) as soon as it has
used them. The nodes are still there, but the second backward finds their saved tensors gone
and stops. `retain_graph=True` on the first call keeps them, so the second call works and,
like any backward, adds its gradient to `.grad`: the result is twice the gradient.

What to look at: backward #1's graph. Without retain_graph, its nodes' saved tensors are
marked freed and the event carries the error; with it, the saved tensors are still there and
`.grad` after is twice `.grad` after backward #0.
"""

import argparse

import torch
from torch import nn

VARIANTS = {
    "without": "backward twice, without retain_graph: the second call fails",
    "with": "retain_graph=True on the first backward: the second one works",
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Linear(3, 2)
x = torch.randn(4, 3)

loss = torch.tanh(model(x)).pow(2).sum()  # addmm, tanh and pow save tensors for backward
loss.backward(retain_graph=args.variant == "with")  # without it the saved tensors are freed
first = model.weight.grad.clone()
try:
    loss.backward()  # the same graph a second time
    print("second backward worked; .grad doubled:", torch.allclose(model.weight.grad, 2 * first))
except RuntimeError as error:
    print("second backward failed:", error)
