"""Updating weights by hand: why the step goes under torch.no_grad()

Question: I wrote gradient descent myself, `w.add_(-lr * w.grad)` after `loss.backward()`, as
in many tutorials, and PyTorch stops with "a leaf Variable that requires grad is being used in
an in-place operation". The step is just arithmetic on the weights; why does autograd care, and
what does `with torch.no_grad():` change?

Answer: while grad mode is on, autograd records every operation on a tensor that requires grad,
so that a later backward can go through it. A weight is a leaf: the start of the graph, where
gradients are collected in `.grad`. Changing it in place while recording would mean the graph
now starts from a different value than the one the forward used, and the change itself would be
something to differentiate, so PyTorch refuses. The update is not part of the model: under
`torch.no_grad()` nothing is recorded, the weight changes in place, and it keeps being a leaf
that requires grad for the next forward. Zeroing `.grad` afterwards is the other half of a step
(an optimizer's `zero_grad()`): gradients add up otherwise.

What to look at: the events. With the no_grad update there is one backward per iteration and
the weight's values change between them; the `.grad` of each backward is the fresh gradient
only, because it is zeroed after each update. Without it, the update line is refused (the
script prints PyTorch's error) after the first backward.
"""

import argparse

import torch

VARIANTS = {
    "no_grad": "the update under torch.no_grad(): the weights change, the graph does not",
    "recorded": "the update while autograd records: PyTorch refuses it",
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)  # a leaf: the graph starts here
x, y = torch.randn(8, 3), torch.randn(8)
lr = 0.1

for step in range(3):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    if args.variant == "no_grad":
        with torch.no_grad():  # the update is not part of the model: record nothing
            w.add_(-lr * w.grad)
        w.grad.zero_()  # or the next backward adds to this gradient
    else:
        try:
            w.add_(-lr * w.grad)  # in place, on a leaf, while autograd records: refused
        except RuntimeError as error:
            print("the update was refused:", error)
            break
    print(f"step {step}: loss {loss.item():.4f}")
