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
    assert internals.creation_line(y.grad_fn, __file__) == line
    assert internals.creation_line(y.grad_fn, "/no/such/file.py") is None
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


def test_accumulated_leaf_is_the_parameter_an_accumulate_grad_node_feeds():
    w = torch.nn.Parameter(torch.randn(3))
    y = w * 2
    accumulate = y.grad_fn.next_functions[0][0]
    assert type(accumulate).__name__ == "AccumulateGrad"
    assert internals.accumulated_leaf(accumulate) is w
    assert internals.accumulated_leaf(y.grad_fn) is None


def test_view_nodes_are_the_backward_of_ops_that_alias_their_input():
    w = torch.randn(4, 6, requires_grad=True)
    views = [w.t(), w.transpose(0, 1), w.permute(1, 0), w.view(24), w.expand(2, 4, 6), w[1:],
             w[0], w.unsqueeze(0), w.narrow(0, 0, 2), w.diagonal(), w.unbind(0)[0],
             w.split(2)[0], w.chunk(2)[0], w.as_strided((2, 2), (1, 1))]
    for v in views:
        # torch says it is a view of w; our name list must say so too
        assert v._base is w, type(v.grad_fn).__name__
        assert internals.is_view_node(type(v.grad_fn).__name__), type(v.grad_fn).__name__
    for computed in (w * 2, w.exp(), w.sum(0), w @ w.t(), w.clone()):
        assert computed._base is None
        assert not internals.is_view_node(type(computed.grad_fn).__name__)


def test_update_calls_are_told_apart_from_uses_under_no_grad():
    seen = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    p = torch.nn.Parameter(torch.randn(2))
    with torch.no_grad(), Mode():
        p.add_(1)
        p += 1
        p.data  # noqa: B018
        p.mul_(2)
    updates, seen = seen, []
    with torch.no_grad(), Mode():
        p * 2  # noqa: B018
        p.exp()
        torch.matmul(p, p)
    uses = seen
    assert updates and all(internals.is_update_call(name) for name in updates), updates
    assert uses and not any(internals.is_update_call(name) for name in uses), uses


def test_function_apply_is_what_the_tracer_wraps_and_puts_back():
    original = internals.function_apply()
    assert torch.autograd.Function.apply.__func__ is original
    x = torch.randn(3, requires_grad=True)
    assert torch.equal(original(_Double, x), x * 2)


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


def test_creation_line_is_the_innermost_line_of_the_file():
    def make(x):
        return x.sin()  # the innermost line of this file on the creating stack

    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        y = make(torch.randn(2, requires_grad=True))
    assert internals.creation_line(y.grad_fn, __file__) == make.__code__.co_firstlineno + 1


def test_saved_tensor_modified_in_place_is_told_apart_from_freed():
    x = torch.randn(3, requires_grad=True)
    h = torch.tanh(x)
    h[0] = 0  # tanh saved its result; this changes it
    (name, value), = internals.saved_values(h.grad_fn.next_functions[0][0])
    assert name == "result" and isinstance(value, internals.Modified)
    assert (value.saved_version, value.version) == (0, h._version) == (0, 1)


def test_op_names_the_recorder_matches_are_the_names_torch_gives_in_a_mode():
    """`detach`, `requires_grad_` and `__setitem__` reach a TorchFunctionMode under these names
    (the recorder matches them through _internals, never by its own strings)."""
    names = []

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            names.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    t = torch.randn(3)
    with Mode():
        t.detach()
        t.detach_()
        t.requires_grad_(False)
        t[0] = 1.0
    assert [internals.is_detach_call(n) for n in names] == [True, True, False, False]
    assert [internals.is_requires_grad_call(n) for n in names] == [False, False, True, False]
    assert [internals.is_inplace_call(n) for n in names] == [False, True, True, True]


def test_plain_tensor_reads_an_ordinary_tensor_or_one_sample_of_one_vmap_level():
    x = torch.arange(6.0).reshape(2, 3)
    assert internals.plain_tensor(x) == (x, False)
    seen = []

    def look(t):
        seen.append(internals.plain_tensor(t))
        return t * 1

    torch.func.vmap(look, in_dims=1)(x)  # batched along dim 1: the first sample is column 0
    (sample, sampled), = seen
    assert sampled and torch.equal(sample, x[:, 0])
    seen.clear()
    torch.func.vmap(torch.func.vmap(look))(x.reshape(2, 3, 1))  # two levels: not one tensor
    torch.func.grad(lambda t: look(t).sum())(x)  # a grad level: not the script's tensor
    assert seen == [(None, False), (None, False)]


def test_is_transform_wrapper_tells_a_transforms_stand_in_from_the_scripts_tensor():
    x = torch.ones(3, requires_grad=True)
    seen = []

    def look(t):
        seen.append(internals.is_transform_wrapper(t))
        return (t * 2).sum()

    torch.func.grad(look)(x)  # a grad level's wrapper
    torch.func.vmap(lambda t: look(t) * 1)(x.reshape(3, 1))  # a vmap batch's
    assert seen == [True, True] and not internals.is_transform_wrapper(x)


def test_in_backward_pass_is_true_only_while_the_engine_runs():
    from app.trace import _internals as internals

    seen = []
    w = torch.ones(2, requires_grad=True)
    y = (w * 2).sum()
    y.register_hook(lambda g: seen.append(internals.in_backward_pass()))
    assert not internals.in_backward_pass()
    y.backward()
    assert seen == [True]


def test_a_requires_grad_assignment_is_told_from_other_attribute_sets():
    from torch.overrides import TorchFunctionMode

    from app.trace import _internals as internals

    funcs = []

    class Seen(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            funcs.append(func)
            return func(*args, **(kwargs or {}))

    w = torch.nn.Parameter(torch.ones(2))
    with Seen():
        w.requires_grad = False
        w.data = torch.zeros(2)
    assert [internals.is_requires_grad_setter(f) for f in funcs if
            getattr(f, "__name__", "") == "__set__"] == [True, False]


def test_a_saved_integer_is_read_as_torch_means_it():
    """NLLLoss's ignore_index of -100 was shown as 18446744073709551516."""
    from app.trace import _internals as internals

    x = torch.randn(3, 4, requires_grad=True)
    loss = torch.nn.functional.nll_loss(x.log_softmax(1), torch.tensor([0, 1, 2]))
    assert loss.grad_fn._saved_ignore_index == 2**64 - 100  # torch's own reading of it
    saved = dict(internals.saved_values(loss.grad_fn))
    assert saved["ignore_index"] == -100
    loss2 = torch.nn.functional.nll_loss(x.log_softmax(1), torch.tensor([0, 1, 2]),
                                         ignore_index=7)
    assert dict(internals.saved_values(loss2.grad_fn))["ignore_index"] == 7


def test_compiled_original_is_the_module_torch_compile_wrapped():
    model = torch.nn.Linear(2, 2)
    wrapper = torch.compile(model, backend="eager")
    assert isinstance(wrapper, torch._dynamo.eval_frame.OptimizedModule)
    assert internals.compiled_original(wrapper) is model
    assert internals.compiled_original(model) is None


def test_aot_eager_capturing_names_each_graph_and_its_node_the_region():
    """AOTAutograd's compilers see "{aot_id}_forward" / "_backward"; the region's node carries
    the same aot_id on its CompiledFunction class. The gradients are aot_eager's own."""
    torch._dynamo.reset()
    seen: list[tuple[str, int]] = []
    backend = internals.aot_eager_capturing(lambda kind, aot_id, gm: seen.append((kind, aot_id)))
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.randn(4, 3)
    out = torch.compile(model, backend=backend)(x)
    (region,) = {aot_id for _, aot_id in seen}
    assert seen == [("forward", region)]
    assert internals.compiled_region_of(out.grad_fn) == region
    assert internals.compiled_region_of(model(x).grad_fn) is None
    out.sum().backward()
    assert seen == [("forward", region), ("backward", region)]
    got = model.weight.grad.clone()
    model.weight.grad = None
    torch._dynamo.reset()
    torch.compile(model, backend="aot_eager")(x).sum().backward()
    assert torch.equal(got, model.weight.grad)
    with torch.no_grad():  # an inference graph is not a region's forward
        torch._dynamo.reset()
        torch.compile(model, backend=backend)(x)
    assert len(seen) == 2
    torch._dynamo.reset()


def test_a_non_reentrant_checkpoint_s_frame_inputs_and_recomputation_are_found():
    """The frame is found from the region's pack hook, its inputs read without the unpack
    hook (a counting forward would see a second call), and the recomputation is told from the
    first forward, for both kinds of checkpoint."""
    from torch.utils.checkpoint import checkpoint
    seen: list = []

    def region(t):
        frame = internals.checkpoint_saving()
        seen.append((frame, internals.recomputing_checkpoint()))
        return torch.tanh(t * 3)

    x = torch.randn(4, 5, requires_grad=True)
    h = x * 2
    out = checkpoint(region, h, use_reentrant=False)
    (frame, again), = seen
    assert frame is not None and again is None  # the first forward: not a recomputation
    [kept] = internals.checkpoint_inputs(frame)
    assert kept.untyped_storage().data_ptr() == h.untyped_storage().data_ptr()
    assert len(seen) == 1  # reading the input ran nothing
    assert internals.checkpoint_saving() is None  # outside the region
    out.sum().backward()
    assert len(seen) == 2 and seen[1][1] is frame  # run again in backward, for this frame
    seen.clear()
    out = checkpoint(region, h.detach().requires_grad_(), use_reentrant=True)
    assert seen[0] == (None, None)  # reentrant: no hook, its forward runs under no_grad
    node = out.grad_fn
    out.sum().backward()
    assert seen[1][1] is node  # CheckpointFunction.backward's ctx is the node
