"""Mixed precision: why the loss is scaled

Question: I train with `torch.autocast` and a `GradScaler`. Which operations really run in
bfloat16, what flows back through them, and why multiply the loss by a big number and then
divide the gradients by it again?

Answer: under autocast on the CPU, `Linear`'s matrix multiply (`addmm`) runs in bfloat16:
autocast casts its weight and bias to bfloat16, each cast a `ToCopyBackward0` node, and ReLU
simply runs in the dtype it is given. The gradient flows back through them in bfloat16 and is
cast back to float32 before it reaches the float32 weights. In float16 a gradient below about
3e-8 rounds to zero, so `scaler.scale(loss)` multiplies the loss, and with it every gradient, by
the scale (65536, GradScaler's default, to begin with), and `scaler.step` divides each `.grad`
back before `optimizer.step()`. bfloat16's smallest normal number is float32's (about 1.2e-38),
so scaling is mostly a float16 matter.
Show: node ToCopyBackward0; line with torch.autocast(

What to look at: in `autocast` the edges into and out of the `AddmmBackward0` nodes carry
bfloat16 gradients, and every parameter's `.grad` is float32. In `scaled` the backward's `.grad`
is 65536 times the `autocast` one, and the step's panel says the scale it divided by. In
`skipped` autocast runs in float16 and the scale starts at 2^24: the scaled gradients pass
float16's largest value, 65504, and become inf, so `scaler.step` skips `optimizer.step()`. The
weights stay where they were and `scaler.update()` halves the scale for the next try. (In
bfloat16 the same scale would have been fine.)
Show: diagnostic grad_scaler_skipped_step
"""

import argparse

import torch
from torch import nn

VARIANTS = {
    "autocast": "the forward under torch.autocast(bfloat16): Linear runs in bfloat16",
    "float32": "the same step without autocast: every gradient in float32",
    "scaled": "autocast and a GradScaler: the loss scaled by 65536, the gradients unscaled",
    "skipped": "float16 and a scale of 2^24: the scaled gradients overflow, the step is skipped",
}
# asked of a class before the graph is explained (presenter mode, classroom.js)
CLASS_QUESTION = {"prompt": "Under torch.autocast(\"cpu\", dtype=torch.bfloat16), what dtype is "
                            "fc1.weight.grad after backward?",
                  "choices": ["bfloat16", "float32", "float16"], "answer": 1}

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

# why scaling exists: a small gradient underflows to zero in float16, not in bfloat16
tiny = torch.tensor(1e-8)
print("1e-8 in float16:", tiny.half().item(), "in bfloat16:", tiny.bfloat16().item())

torch.manual_seed(0)
model = nn.Sequential()
model.add_module("fc1", nn.Linear(4, 8))
model.add_module("relu", nn.ReLU())
model.add_module("fc2", nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
before = model.fc1.weight.detach().clone()

low = torch.float16 if args.variant == "skipped" else torch.bfloat16
with torch.autocast("cpu", dtype=low, enabled=args.variant != "float32"):
    out = model(x)  # Linear's addmm in bfloat16 (float16) under autocast
print("output dtype:", out.dtype)
loss = nn.functional.mse_loss(out.float(), y)  # the loss in float32, outside autocast

if args.variant in ("scaled", "skipped"):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** (16 if args.variant == "scaled" else 24))
    scaler.scale(loss).backward()  # every gradient `scale` times too big
    print("scale:", scaler.get_scale(), "fc1.weight.grad norm (scaled):",
          f"{model.fc1.weight.grad.norm():.6g}")
    scaler.step(optimizer)  # unscales .grad, then steps only if every gradient is finite
    scaler.update()  # halves the scale after an inf, else keeps it (doubles after 2000 good steps)
    print("scale after update:", scaler.get_scale())
else:
    loss.backward()
    optimizer.step()
print("fc1.weight.grad dtype:", model.fc1.weight.grad.dtype,
      f"norm {model.fc1.weight.grad.norm():.6g}")
print("fc1.weight moved:", not torch.equal(model.fc1.weight.detach(), before))
