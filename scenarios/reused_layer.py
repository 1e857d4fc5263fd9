"""A layer reused k times in one forward pass

Question: my network applies the same `middle_linear` several times in one forward pass (like
the dynamic network in PyTorch's tutorial). Does its weight get updated once per use?

Answer: no. `backward()` only computes gradients: every use of the layer sends its own
gradient term to the weight's AccumulateGrad node, and `.grad` is their sum. The optimizer step
then moves the weight once, by `lr` times that summed gradient.
Show: node MseLossBackward0

What to look at: the parameter `middle_linear.weight` has one incoming edge per use. Click it
to see one bar per use and their sum drawn against `.grad`. Try k = 0: the layer is never
used, so its weight gets no gradient at all.
Show: param middle_linear.weight; line self.middle_linear(h)
"""

import argparse

import torch
from torch import nn

OPTIONS = {"k": {"default": 3, "choices": [0, 1, 2, 3],
                 "help": "how many times the middle layer is applied"}}
# asked of a class before the graph is explained (presenter mode, classroom.js)
CLASS_QUESTION = {"prompt": "With k = 3, how many times does the optimizer step move "
                            "middle_linear.weight?",
                  "choices": ["0", "1", "3", "4"], "answer": 1}


class DynamicNet(nn.Module):
    def __init__(self, d_in=4, hidden=5, d_out=2):
        super().__init__()
        self.input_linear = nn.Linear(d_in, hidden)
        self.middle_linear = nn.Linear(hidden, hidden)
        self.output_linear = nn.Linear(hidden, d_out)

    def forward(self, x, k):
        h = self.input_linear(x).clamp(min=0)
        for _ in range(k):  # the same module, and so the same weight, each time round
            h = self.middle_linear(h).clamp(min=0)
        return self.output_linear(h)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--k", type=int, default=3, choices=[0, 1, 2, 3])
args = parser.parse_args()

torch.manual_seed(0)
model = DynamicNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
y = torch.randn(8, 2)

optimizer.zero_grad()
loss = nn.functional.mse_loss(model(x, args.k), y)
loss.backward()  # one gradient term per use of middle_linear, summed into .grad
before = model.middle_linear.weight.detach().clone()
optimizer.step()  # one update, by lr * (the summed gradient)

grad = model.middle_linear.weight.grad
moved = model.middle_linear.weight.detach() - before
print(f"k = {args.k}: loss {loss.item():.4f}")
if grad is None:
    print("middle_linear.weight.grad is None: the layer was not used")
else:
    print("step moved the weight by -lr * grad:", torch.allclose(moved, -0.1 * grad))
