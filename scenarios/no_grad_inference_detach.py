"""no_grad, inference_mode and detach side by side: a frozen encoder and a trained head

Question: I use a pretrained encoder as a fixed feature extractor and train only a small head
on its features. Should I compute the features under `torch.no_grad()`, under
`torch.inference_mode()`, or call `.detach()` on them? What is the difference?

Answer: in all three the head learns and the encoder gets no gradient: the backward graph
stops at the features. They differ in what happens on the way. `no_grad` records no graph for
the encoder at all. `detach` records it (saving tensors for a backward that never comes) and
then cuts the result off it: the same values, for more time and memory. `inference_mode`
is the cheapest, but its outputs are "inference tensors" that autograd refuses to save for
backward, so using them directly in a layer that trains fails; clone them first.

What to look at: the graph holds only the head; the diagnostics list every encoder parameter as
receiving no gradient (for no_grad and inference_mode they name the line that read it). The
head's gradient is the same in all three variants. In `inference_mode`, the output shows the
error the first attempt raised.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = {
    "no_grad": "features computed under torch.no_grad()",
    "inference_mode": "features computed under torch.inference_mode(), then cloned",
    "detach": "features computed with the graph recorded, then detached",
}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))  # "pretrained", frozen
head = nn.Linear(3, 2)  # the only part we train
x = torch.randn(5, 4)
y = torch.randn(5, 2)

if args.variant == "no_grad":
    with torch.no_grad():
        features = encoder(x)  # nothing recorded
elif args.variant == "inference_mode":
    with torch.inference_mode():
        features = encoder(x)  # nothing recorded, and the result is an inference tensor
    try:
        F.mse_loss(head(features), y)  # the head's matmul would save features for backward
    except RuntimeError as error:
        print("using the inference tensor failed:", error)
    features = features.clone()  # a normal tensor with the same values
else:
    features = encoder(x).detach()  # the encoder's graph was recorded, then cut off here
print("features require grad:", features.requires_grad)

loss = F.mse_loss(head(features), y)
loss.backward()  # the graph stops at the features
print("encoder[0].weight.grad:", encoder[0].weight.grad)
print("head.weight.grad norm:", f"{head.weight.grad.norm():.4f}")
