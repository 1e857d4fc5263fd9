"""A custom autograd.Function that keeps the weight gradient only in chosen columns

Question: I want a linear layer whose weights learn only in some input columns (the others stay
frozen), so I wrote a custom `autograd.Function` whose backward masks the weight gradient. How
do I write that backward correctly, and how can I see that it does what I meant?

Answer: `backward` returns one gradient per `forward` input, in the same order. For the weight,
compute the true gradient `grad_output.T @ x` and multiply it by a 0/1 column mask built from
the indices in one vectorised step; for the index argument, which is not differentiable, return
None. The heat map of the weight's gradient then shows zero columns everywhere except the
chosen ones, which hold the true gradient. gradcheck compares the backward with finite
differences and fails, as it should: this backward is deliberately not the true gradient.
Show: heatmap weight; line grad_weight = (grad_output.T @ x) * mask

What to look at: the MaskedLinearBackward node (kind custom) sits where an AddmmBackward0 would
be, with edges from the weight and the bias only: not from x (it requires no grad) and not from
the column indices. Click `weight` for the heat map; the node's details show its backward's
source and the gradcheck result.
Show: node MaskedLinearBackward; line MaskedLinear.apply(

The version often copied from forums has three slips, all avoided here: it returns a gradient
for the index argument (autograd throws it away after it was computed for nothing, and when the
indices are a Python list the backward fails: "returned a gradient different than None at
position 4, but the corresponding forward input was not a Variable"); it checks
`ctx.needs_input_grad[0]` before computing the weight's gradient, but slot 0 is `x`, the weight
is slot 1; and it builds the mask element by element in Python loops, which is slow and hides
the one-line idea.
"""

import torch
import torch.nn.functional as F
from torch import nn


class MaskedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, columns):
        ctx.save_for_backward(x, weight, columns)
        return x @ weight.T + bias

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, columns = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # slot 0 is x
            grad_x = grad_output @ weight
        if ctx.needs_input_grad[1]:  # slot 1 is the weight
            mask = torch.zeros(weight.shape[1], dtype=weight.dtype, device=weight.device)
            mask[columns] = 1  # one vectorised step: 1 in the chosen input columns
            grad_weight = (grad_output.T @ x) * mask  # true gradient, zero outside the columns
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_x, grad_weight, grad_bias, None  # None: the indices are not differentiable


class ColumnMaskedLinear(nn.Module):
    def __init__(self, d_in, d_out, columns):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) / d_in ** 0.5)
        self.bias = nn.Parameter(torch.zeros(d_out))
        self.register_buffer("columns", torch.tensor(columns))

    def forward(self, x):
        return MaskedLinear.apply(x, self.weight, self.bias, self.columns)


torch.manual_seed(0)
layer = ColumnMaskedLinear(6, 3, columns=[1, 4])  # only input columns 1 and 4 learn
x = torch.randn(5, 6)
target = torch.randn(5, 3)

loss = F.mse_loss(layer(x), target)
loss.backward()  # the engine reaches MaskedLinearBackward and calls MaskedLinear.backward
print("layer.weight.grad (zero outside columns 1 and 4):")
print(layer.weight.grad)
