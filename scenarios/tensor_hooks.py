"""A tensor hook that rescales the gradient flowing through an activation

Question: I call `h.register_hook(lambda grad: grad * 0.5)` on a hidden activation. What does
that change in the backward pass, and which gradients does it affect?

Answer: the hook runs when the backward pass has computed the gradient with respect to `h`,
before that gradient goes any further. What it returns replaces it. So everything computed
from that gradient, the layers below `h`, sees half the gradient, while the layers above `h`
(which produced it) are untouched. The forward pass, and `h` itself, do not change at all.

What to look at: compare the variants. The second layer's weight gradient is the same in
both; the first layer's weight and bias gradients are exactly halved with the hook. On the
graph, the edge that carries the gradient with respect to h (into h's ReluBackward0 node) has
the same norm in both variants, and every edge below it is halved. With the hook on the
parameter itself (`leaf_hook`), click first.weight: its use sends the gradient as the graph
computed it, and the hook's change is a bar of its own, with the hook's line, so the use and
the hook add up to .grad.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = {
    "halve": "h.register_hook(lambda grad: grad * 0.5) on the hidden activation",
    "no_hook": "the same network without the hook, for comparison",
    "leaf_hook": "first.weight.register_hook(lambda grad: grad.clamp(-0.05, 0.05)): a hook on "
                 "a parameter, which changes its gradient on the way into .grad",
}


class TwoLayers(nn.Module):
    def __init__(self, hook):
        super().__init__()
        self.first = nn.Linear(3, 4)
        self.second = nn.Linear(4, 2)
        self.hook = hook

    def forward(self, x):
        h = F.relu(self.first(x))
        if self.hook:
            h.register_hook(lambda grad: grad * 0.5)  # replaces dL/dh during backward
        return self.second(h)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
model = TwoLayers(hook=args.variant == "halve")
if args.variant == "leaf_hook":
    model.first.weight.register_hook(lambda grad: grad.clamp(-0.05, 0.05))
x = torch.randn(5, 3)
y = torch.randn(5, 2)

loss = F.mse_loss(model(x), y)
loss.backward()
print("first.weight.grad norm: ", f"{model.first.weight.grad.norm():.4f}")
print("second.weight.grad norm:", f"{model.second.weight.grad.norm():.4f}")
