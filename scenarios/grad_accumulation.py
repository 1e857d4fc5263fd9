"""Two backward passes without zero_grad: .grad adds up

Question: I call `loss.backward()` for two batches in a row and forget `zero_grad()` in
between. What is in `.grad` after the second backward?

Answer: the sum of both batches' gradients. `backward()` never overwrites `.grad`: each
AccumulateGrad node adds its incoming gradient to whatever `.grad` already holds. That is a bug
when you meant to train on each batch on its own, and exactly the tool you want when a batch is
too big for memory: split it into micro-batches, scale each loss by its share, call backward
on each, and `.grad` ends up as the full batch's gradient before the one optimizer step.

What to look at: backward #1's `.grad before` is backward #0's `.grad after`, and `after` is
`before` plus this pass's contribution. With `zero_grad` in between, `before` is None (zero_grad
sets `.grad` to None) and `after` is this batch's gradient alone. In `micro_batches` the sum
after the second pass is the gradient of the whole batch: backward #2, `torch.autograd.grad` on
the whole batch's loss, returns the same tensor (and, being autograd.grad, leaves `.grad`
alone).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = {
    "no_zero_grad": "two batches, two backward passes, no zero_grad: the gradients add up",
    "zero_grad": "zero_grad before each backward: .grad holds one batch's gradient",
    "micro_batches": "one batch in two halves, each loss scaled by 1/2: the full-batch gradient",
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Linear(3, 1)
x = torch.randn(8, 3)
y = torch.randn(8, 1)
batches = [(x[:4], y[:4]), (x[4:], y[4:])]

model.zero_grad()
for i, (xb, yb) in enumerate(batches):
    if args.variant == "zero_grad":
        model.zero_grad()  # each batch starts from .grad = None (as optimizer.zero_grad())
    loss = F.mse_loss(model(xb), yb)
    if args.variant == "micro_batches":
        loss = loss / len(batches)  # each half's share of the full-batch mean
    loss.backward()  # AccumulateGrad adds to whatever .grad already holds
    print(f"after batch {i}: weight.grad = {model.weight.grad.tolist()}")

if args.variant == "micro_batches":
    full = torch.autograd.grad(F.mse_loss(model(x), y), model.weight)[0]
    print("accumulated .grad equals the full-batch gradient:",
          torch.allclose(model.weight.grad, full, atol=1e-6))
