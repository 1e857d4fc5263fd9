"""An in-place change to a tensor saved for backward: the version counter

Question: I zero one column of an activation with `h[:, 0] = 0` and `backward()` fails with
"one of the variables needed for gradient computation has been modified by an inplace
operation". Which variable, and how do I fix it?

Answer: `tanh` saves its output `h` to compute its gradient (1 - h²). Every tensor carries a
version counter that each in-place operation increments; the node remembers the version it
saved (0), and at backward it finds version 1, so the saved values are no longer the ones the
forward used and autograd refuses to go on. The fix: do not modify a saved tensor in place.
Multiply by a mask (`h = h * keep`), or clone first and modify the clone.

What to look at: in `inplace` the backward event carries the error, which names the tensor
(output 0 of Tanh) and both versions, and stops at TanhBackward0 in the execution order; `h[:,
0] = 0` became a CopySlices node on top of the tanh. In `fixed` the graph has a MulBackward0
instead and the gradients arrive.
"""

import argparse

import torch
from torch import nn

VARIANTS = {
    "inplace": "h[:, 0] = 0 on tanh's output: backward fails with the version-counter error",
    "fixed": "h = h * keep: a new tensor, tanh's saved output is left alone",
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
layer = nn.Linear(3, 4)
x = torch.randn(5, 3)

h = torch.tanh(layer(x))  # TanhBackward0 saves h (version 0) for its backward
if args.variant == "inplace":
    h[:, 0] = 0  # in place: h's version counter goes to 1
else:
    keep = torch.ones(4)
    keep[0] = 0
    h = h * keep  # a new tensor: the saved h stays at version 0
print("version of tanh's output:", h._version)
loss = h.pow(2).sum()
try:
    loss.backward()
    print("layer.weight.grad:", layer.weight.grad)
except RuntimeError as error:
    print("backward failed:", error)
