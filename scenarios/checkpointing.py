"""Gradient checkpointing: memory for compute

Question: I wrap the middle blocks of my model in `torch.utils.checkpoint`. What does the graph
no longer keep for backward, what does it cost, and are my gradients still the same?

Answer: without checkpointing, every operation in the forward saves what its backward will
need (the input of a Linear, the output of a ReLU) and the graph keeps all of it until the
backward has used it. Inside a checkpoint those tensors are not kept: the checkpoint keeps the
region's input, and during backward it runs the region's forward again to make them. The bytes
held for backward go down by what only the region's operations saved; the region's forward
runs twice; `.grad` is the same, since the same operations run on the same values.

What to look at: compare the variants' "Held for backward" lines and the bytes each module
held. With checkpointing, the nodes of `blocks.1` and `blocks.2` name their saved tensors but
hold no bytes: the checkpoint's hook took them, and the checkpoint keeps only its input. The
pass lists the modules whose forward ran again during backward. The script's own count says
it too: four block forwards without checkpointing, six with. The same panel gives the
allocator's peak during the forward (torch's profiler): lower with checkpointing too, since a
checkpointed block's intermediates are freed as soon as its forward ends.
Show: line checkpoint(block, h

The `reentrant` variant uses the older `use_reentrant=True`: each region is one
CheckpointFunctionBackward node, which saves only the region's input and, during backward,
runs the forward again and a backward of its own inside the pass. Same gradients, and here the
same bytes held.
"""

import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

VARIANTS = {
    "without": "a plain forward: every operation keeps what its backward needs",
    "with": "blocks 1 and 2 in torch.utils.checkpoint (use_reentrant=False)",
    "reentrant": "blocks 1 and 2 in torch.utils.checkpoint (use_reentrant=True)",
}

WIDTH, HIDDEN, BATCH = 32, 128, 64
CHECKPOINTED = (1, 2)  # the middle blocks


class Block(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU: each Linear saves its input, each ReLU its output."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)
        self.forwards = 0  # how many times this block's forward ran

    def forward(self, x):
        self.forwards += 1
        return torch.relu(self.down(torch.relu(self.up(x))))


class Model(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, h):
        for i, block in enumerate(self.blocks):
            if self.variant != "without" and i in CHECKPOINTED:
                h = checkpoint(block, h, use_reentrant=self.variant == "reentrant")
            else:
                h = block(h)
        return self.head(h)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
model = Model(args.variant)
x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
loss = (model(x) - y).pow(2).mean()
print("block forwards before backward:", sum(b.forwards for b in model.blocks))
loss.backward()  # a checkpointed block's forward runs again here
print("block forwards after backward:", sum(b.forwards for b in model.blocks))
print("blocks.1.up.weight.grad norm:", f"{model.blocks[1].up.weight.grad.norm():.6f}")
