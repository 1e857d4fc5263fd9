"""A custom Function that leaves torch: 2-D cross-correlation in NumPy

Question: my `forward` leaves torch entirely (it computes a 2-D cross-correlation in NumPy, like
the SciPy convolution of PyTorch's "extending autograd" tutorial), and I never registered my
`backward` anywhere. How does the graph know to call it?

Answer: `NumpyConv2dFunction.apply` does the registering. It runs `forward` with gradient
recording off, then records one `NumpyConv2dFunctionBackward` node on the output, with an edge
to each input that requires grad: the image, the filter and the bias. Nothing inside `forward`
is recorded, so the node is a black box to autograd. When the backward pass reaches it, the
engine calls the class's `backward` with the output's gradient and passes the returned
gradients along those edges. gradcheck compares that backward with finite differences: it
passes.
Show: line NumpyConv2dFunction.apply(

What to look at: the custom node (its own colour) with three incoming edges, from the
AccumulateGrad nodes of `image`, `filter` and `bias`. Its details show the source of `backward`
and the gradcheck result; the step control shows the engine reaching it once the loss's own
nodes (mean, pow, sub) have run, and only then the three AccumulateGrad nodes.
Show: node NumpyConv2dFunctionBackward
"""

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch import nn


def correlate2d(image, filter):
    """'valid' 2-D cross-correlation, in NumPy (what scipy.signal.correlate2d computes)."""
    windows = sliding_window_view(image, filter.shape)  # every filter-sized patch of the image
    return np.einsum("ijkl,kl->ij", windows, filter)


def convolve2d_full(image, filter):
    """'full' 2-D convolution: correlate the zero-padded image with the flipped filter."""
    kh, kw = filter.shape
    padded = np.pad(image, ((kh - 1, kh - 1), (kw - 1, kw - 1)))
    return correlate2d(padded, filter[::-1, ::-1])


class NumpyConv2dFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, image, filter, bias):
        # torch records nothing in here: this is plain NumPy arithmetic
        image_np, filter_np = image.detach().cpu().numpy(), filter.detach().cpu().numpy()
        result = correlate2d(image_np, filter_np) + bias.item()
        ctx.save_for_backward(image, filter)
        return torch.as_tensor(result, dtype=image.dtype, device=image.device)

    @staticmethod
    def backward(ctx, grad_output):
        image, filter = ctx.saved_tensors
        g = grad_output.detach().cpu().numpy()
        grad_image = convolve2d_full(g, filter.detach().cpu().numpy())
        grad_filter = correlate2d(image.detach().cpu().numpy(), g)
        grad_bias = np.sum(g, keepdims=True).reshape(1)
        as_tensor = lambda a: torch.as_tensor(a, dtype=grad_output.dtype, device=grad_output.device)  # noqa: E731
        return as_tensor(grad_image), as_tensor(grad_filter), as_tensor(grad_bias)


class NumpyConv2d(nn.Module):
    def __init__(self, filter_width, filter_height):
        super().__init__()
        self.filter = nn.Parameter(torch.randn(filter_width, filter_height))
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, image):
        return NumpyConv2dFunction.apply(image, self.filter, self.bias)


torch.manual_seed(0)
module = NumpyConv2d(3, 3)
image = torch.randn(5, 5, requires_grad=True)
target = torch.randn(3, 3)

output = module(image)  # one NumpyConv2dFunctionBackward node, edges to image, filter, bias
loss = (output - target).pow(2).mean()
loss.backward()  # the engine calls NumpyConv2dFunction.backward when it reaches that node
print("filter gradient:")
print(module.filter.grad)
