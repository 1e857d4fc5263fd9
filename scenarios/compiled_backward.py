"""What torch.compile does to your backward

Question: I wrap my model in `torch.compile`. The gradients come out the same, but the backward
graph looks nothing like the eager one. Where did my layers go, and what does the backward keep
from the forward?

Answer: dynamo captures the forward into an FX graph, and AOTAutograd traces that graph's
forward and backward together as ATen ops, then cuts the joint graph in two: a forward graph
and a backward graph. Its partitioner chooses what the forward saves for the backward and what
the backward computes again because that is cheaper than keeping it. Autograd sees a compiled
region as one node, `CompiledFunctionBackward`, in place of the eager nodes. The `.grad` it
leaves equals eager's to float rounding. A graph break (a `print` in `forward`) splits the model
into two regions, each with its own node and its own backward.
Show: node CompiledFunctionBackward; line run = model if

What to look at: compare the `eager` variant's addmm, relu and transpose nodes with the
`compiled` variant's single `CompiledFunctionBackward`. Click it: its panel lists the forward's
and backward's ATen ops, what the forward saved (the input `x`, `fc2.weight` and the ReLU's
output) and what the backward recomputes: the transpose of `fc2.weight` (`aten.t`), rebuilt from
the saved weight rather than saved itself. In `graph_break` the
`print` ends the first region and two such nodes are chained. On this site the sandbox cannot
run a C++ compiler, so the page compiles with the `aot_eager` backend instead of Inductor: the
same dynamo capture and AOTAutograd partition, the graphs run as eager ops.
Show: diagnostic compiled_with_aot_eager
"""

import argparse

import torch
from torch import nn

VARIANTS = {
    "compiled": "torch.compile(model): one CompiledFunctionBackward node for the whole model",
    "eager": "the model as it is: one autograd node per operation",
    "graph_break": "compiled, with a print in forward: two regions, two compiled nodes",
}
# asked of a class before the graph is explained (presenter mode, classroom.js)
CLASS_QUESTION = {"prompt": "torch.compile(model), no graph break: how many nodes does "
                            "autograd's backward graph have for the model's two layers?",
                  "choices": ["one per operation, as in eager", "one per layer",
                              "one for the whole model"], "answer": 2}


class MLP(nn.Module):
    def __init__(self, graph_break):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 1)
        self.graph_break = graph_break

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.graph_break:
            print("hidden activations:", tuple(h.shape))  # dynamo cannot capture a print
        return self.fc2(h)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
model = MLP(graph_break=args.variant == "graph_break")
x = torch.randn(5, 4)
y = torch.randn(5, 1)

run = model if args.variant == "eager" else torch.compile(model)
loss = nn.functional.mse_loss(run(x), y)
loss.backward()  # through the compiled region's backward graph, where there is one
for name, param in model.named_parameters():
    print(f"{name}.grad norm {param.grad.norm():.6f}")
