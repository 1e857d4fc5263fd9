"""Three ways to stop a gradient: requires_grad_(False), detach, and the no_grad that fails

Question: my `Linear` is used twice. I want its weights to learn from the first use only, while
the gradient still flows back through the second use to the first. How do I stop the gradient
into the weights at the second use?

Answer: make the second use read the weights as constants. Either switch them off around that
use (`requires_grad_(False)`, then back on), or pass detached copies to `F.linear`. Both keep
the second use in the graph, so the gradient still reaches the first use through it; only the
edges into the weights' AccumulateGrad nodes are gone. `torch.no_grad()` is not a way to do it:
nothing computed inside it is recorded, so the second output has no `grad_fn` and `backward()`
fails; the first use receives nothing at all.
Show: line self.linear.requires_grad_(False)

What to look at: in `both_uses` (no stopping, for comparison) `linear.weight` has two incoming
edges and `.grad` is their sum. In `requires_grad` and `detach` it has one: from the first use,
whose gradient has come back through the second use's AddmmBackward0 node. That node still
saves the weight's values (it needs them to send the gradient back to h), but has no edge into
the weight: the drawing marks that cut with a dashed edge. In `no_grad` the graph stops at
the loss: the backward error and the diagnostic say why.
Show: param linear.weight
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = {
    "requires_grad": "requires_grad_(False) around the second use, then back on",
    "detach": "the second use is F.linear with detached weight and bias",
    "no_grad": "the second use under torch.no_grad(): the attempt that fails",
    "both_uses": "no stopping at all, for comparison: two uses, two terms in .grad",
}


class TwoUses(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.variant = variant

    def forward(self, x):
        h = torch.tanh(self.linear(x))  # first use: the weights should learn from this one
        if self.variant == "requires_grad":
            self.linear.requires_grad_(False)  # the weights are constants for a moment...
            out = self.linear(h)  # ...so this use records no edge into them
            self.linear.requires_grad_(True)
        elif self.variant == "detach":
            out = F.linear(h, self.linear.weight.detach(), self.linear.bias.detach())
        elif self.variant == "no_grad":
            with torch.no_grad():
                out = self.linear(h)  # nothing here is recorded, not even the path back to h
        else:
            out = self.linear(h)  # second use, weights included
        return out


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
model = TwoUses(args.variant)
x = torch.randn(4, 3)
target = torch.randn(4, 3)

out = model(x)
print("second output has a grad_fn:", out.grad_fn is not None)
loss = F.mse_loss(out, target)
try:
    loss.backward()
except RuntimeError as error:  # the no_grad variant: there is no graph to go back through
    print("backward failed:", error)
grad = model.linear.weight.grad
print("linear.weight.grad:", "None" if grad is None else f"norm {grad.norm():.4f}")
