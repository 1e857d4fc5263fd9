"""Each private torch internal the tracer relies on, against the installed torch.

If a torch upgrade renames or drops one of them, this file fails and says which one.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from app.trace import _internals as internals


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_anomaly_metadata_records_the_creating_line():
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        x = torch.randn(3, requires_grad=True)
        y = x.exp()
    line = _this_line() - 1
    stack = internals.creation_stack(y.grad_fn)
    assert (__file__, line) in [(f, n) for f, n, _ in stack]
    internals.node_metadata(y.grad_fn)["tag"] = "kept"
    assert y.grad_fn.metadata["tag"] == "kept"  # the dict lives on the node


def test_saved_values_of_builtin_and_custom_nodes():
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    y = a @ b
    saved = dict(internals.saved_values(y.grad_fn))
    assert saved["self"].shape == (2, 3) and saved["mat2"].shape == (3, 4)
    y.sum().backward()
    assert all(v is internals.FREED for k, v in internals.saved_values(y.grad_fn)
               if k in ("self", "mat2"))
    z = _Double.apply(a)
    assert internals.is_custom_function_node(z.grad_fn)
    assert not internals.is_custom_function_node(y.grad_fn)
    assert internals.forward_class(z.grad_fn) is _Double
    (name, t), = internals.saved_values(z.grad_fn)
    assert name == "saved_tensors[0]" and t.shape == (2, 3)


def test_input_shapes():
    x = torch.randn(4, 5, requires_grad=True)
    assert internals.input_shapes((x * 2).grad_fn) == [[4, 5]]


def test_data_getter_is_recognised_in_a_torch_function_mode():
    seen = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(internals.is_data_getter(func))
            return func(*args, **(kwargs or {}))

    p = torch.nn.Parameter(torch.randn(2))
    with Mode():
        p.data  # noqa: B018
        p.grad  # noqa: B018
    assert seen == [True, False]


def _this_line() -> int:
    import inspect

    return inspect.currentframe().f_back.f_lineno


def test_creation_line_agrees_with_the_full_stack():
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        y = torch.randn(2, requires_grad=True).sin()
    stack = internals.creation_stack(y.grad_fn)
    expected = [n for f, n, _ in stack if f == __file__][-1]
    assert internals.creation_line(y.grad_fn, __file__) == expected
    assert internals.creation_line(y.grad_fn, "/no/such/file.py") is None


def test_saved_tensor_modified_in_place_is_told_apart_from_freed():
    x = torch.randn(3, requires_grad=True)
    h = torch.tanh(x)
    h[0] = 0  # tanh saved its result; this changes it
    (name, value), = internals.saved_values(h.grad_fn.next_functions[0][0])
    assert name == "result" and value is internals.MODIFIED
