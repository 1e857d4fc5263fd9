"""Every private PyTorch internal the tracer touches, in one module: private attributes, and
the knowledge of torch's own names (which grad_fn classes are views, which calls update a
tensor in place) that a torch release may change.

`tests/trace/test_internals.py` exercises each of these against the installed torch, so a torch
upgrade that renames or removes one fails loudly there rather than quietly emptying the page.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import torch
import torch.utils.checkpoint as _checkpoint

__all__ = [
    "FREED",
    "Modified",
    "CHECKPOINT_TAG",
    "accumulated_leaf",
    "checkpoint_inputs",
    "checkpoint_saving",
    "aot_eager_capturing",
    "compiled_original",
    "compiled_region_of",
    "creation_line",
    "LINE_TAG",
    "CELL_TAG",
    "forward_class",
    "function_apply",
    "is_custom_function_node",
    "is_data_getter",
    "is_grad_getter",
    "is_detach_call",
    "is_inplace_call",
    "is_requires_grad_call",
    "is_transform_wrapper",
    "is_update_call",
    "is_view_node",
    "plain_tensor",
    "node_metadata",
    "recomputing_checkpoint",
    "saved_values",
    "saving_is_hooked",
    "PACKED",
    "PACKED_TAG",
]

_SAVED_PREFIX = "_saved_"
_saved_attrs_by_type: dict[type, tuple[str, ...]] = {}


def node_metadata(fn: Any) -> dict:
    """The per-node dict that anomaly mode fills (`traceback_`) and that we tag (module path)."""
    return fn.metadata


# the script line the recorder tagged a node with when the op that made it returned: cheap,
# unlike anomaly mode's formatted stack, which is only kept on for small scripts
LINE_TAG = "autograd_lab.line"
# (execution count, line) of the notebook cell a node's op is written in, when that is not
# the traced cell (recorder.py Recorder.cell_files)
CELL_TAG = "autograd_lab.cell_line"


def creation_line(fn: Any, path: str) -> int | None:
    """The innermost line of file `path` in the stack that created `fn`: the recorder's tag
    (LINE_TAG), else what anomaly mode kept.

    Anomaly mode stores the formatted forward stack under `traceback_` (a list of strings in
    torch 2.x, one string in older releases). Big graphs ask this of every node, so the text is
    searched for the file's last frame rather than parsed whole.
    """
    meta = node_metadata(fn)
    tagged = meta.get(LINE_TAG)
    if tagged is not None:
        return tagged
    raw = meta.get("traceback_")
    if raw is None:
        return None
    text = "".join(raw) if isinstance(raw, list) else str(raw)
    marker = f'File "{path}", line '
    at = text.rfind(marker)
    if at < 0:
        return None
    start = at + len(marker)
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return int(text[start:end]) if end > start else None


# A node made while a saved_tensors_hooks pair was active (a non-reentrant checkpoint, CPU
# offload): its saved tensors are whatever the pack hook kept, and reading one runs the unpack
# hook, which for a checkpoint recomputes the region's forward (outside the engine, again on
# the next backward). recorder.py tags such nodes; their tensors are named, never read.
PACKED_TAG = "autograd_lab.packed"
PACKED = object()


def saving_is_hooked() -> bool:
    """Is a saved_tensors_hooks pair active now (for the nodes being made)?"""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


# torch.utils.checkpoint (use_reentrant=False) keeps a region's inputs on a frame object of its
# own (`_CheckpointFrame.saved_args`, SavedTensors), not on a node, and its saved-tensor hooks
# are closures over that frame: the region's pack hook (`_checkpoint_hook`), its recomputation's
# pack hook (`_recomputation_hook`, behind dynamo's disable wrapper), the unpack hook that runs
# the recomputation. Nodes made in a region carry a weak reference to their frame under this tag.
CHECKPOINT_TAG = "autograd_lab.checkpoint"
_CHECKPOINT_MODULE = "torch.utils.checkpoint"
_CHECKPOINT_FILE = _checkpoint.__file__


def checkpoint_saving() -> Any:
    """The frame of the non-reentrant checkpoint whose forward is saving tensors now (its pack
    hook is the innermost saved_tensors_hooks pair), else None."""
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if not hooks:
        return None
    pack = hooks[0]
    if getattr(pack, "__module__", None) != _CHECKPOINT_MODULE or \
            not getattr(pack, "__qualname__", "").startswith("_checkpoint_hook."):
        return None
    code, cells = getattr(pack, "__code__", None), getattr(pack, "__closure__", None) or ()
    if code is None or "frame" not in code.co_freevars:
        return None
    return cells[code.co_freevars.index("frame")].cell_contents


def checkpoint_inputs(frame: Any) -> list[torch.Tensor]:
    """The tensors a non-reentrant checkpoint keeps for its recomputation (its inputs). Read
    through SavedTensor.data, which runs no unpack hook (`unpack` would run the script's)."""
    out = []
    for arg in getattr(frame, "saved_args", None) or ():
        if isinstance(arg, torch._C._autograd.SavedTensor):
            value = arg.data
            if isinstance(value, torch.Tensor):
                out.append(value)
    return out


def recomputing_checkpoint(max_depth: int = 200) -> Any:
    """During a backward pass, the checkpoint whose forward is being run again now: the frame
    of a non-reentrant one (its unpack hook is on the stack), or the node of a reentrant one
    (CheckpointFunction.backward's `ctx` is its CheckpointFunctionBackward node); else None.
    Read off the Python stack, which only the recomputation's own calls go through."""
    if not in_backward_pass():
        return None
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        if frame.f_code.co_filename == _CHECKPOINT_FILE:
            name = frame.f_code.co_name
            if name == "unpack_hook" and "frame" in frame.f_code.co_freevars:
                return frame.f_locals.get("frame")
            if name == "backward" and "ctx" in frame.f_code.co_varnames:
                return frame.f_locals.get("ctx")
        frame = frame.f_back
    return None


def saved_values(fn: Any, packed: bool = False) -> list[tuple[str, Any]]:
    """(name, value) of what a node saved for backward.

    Built-in nodes expose `_saved_<name>` attributes; a custom Function's node exposes
    `saved_tensors`. Reading a freed value raises RuntimeError ("freed"), and so does reading
    one modified in place since ("modified").
    """
    # a Function's node (the script's, or torch's own: a checkpoint keeps its inputs on one)
    if isinstance(fn, torch.autograd.function.BackwardCFunction):
        if packed:
            return [("saved_tensors", PACKED)]
        try:
            return [(f"saved_tensors[{i}]", t) for i, t in enumerate(fn.saved_tensors)]
        except RuntimeError as exc:
            return [("saved_tensors", _unreadable(exc))]
    names = _saved_attrs_by_type.get(type(fn))
    if names is None:
        names = tuple(a for a in dir(fn) if a.startswith(_SAVED_PREFIX))
        _saved_attrs_by_type[type(fn)] = names
    out = []
    for attr in names:
        if packed and hasattr(fn, "_raw" + attr):  # a tensor (not a size or a scalar)
            out.append((attr[len(_SAVED_PREFIX):], PACKED))
            continue
        try:
            value = getattr(fn, attr)
        except RuntimeError as exc:
            value = _unreadable(exc)
        out.append((attr[len(_SAVED_PREFIX):], _signed(value)))
    return out


def _signed(value: Any) -> Any:
    """An integer torch saved as a signed 64-bit one but hands out read as unsigned
    (NllLossBackward0's ignore_index of -100 came out as 18446744073709551516): as torch means
    it. Python ints past 2**63 are nothing torch saves otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and 2**63 <= value < 2**64:
        return value - 2**64
    if isinstance(value, tuple):
        return tuple(_signed(v) for v in value)
    return value


class _Freed:
    def __repr__(self) -> str:
        return "<freed>"


class Modified:
    """A saved tensor changed in place since it was saved: backward will refuse it. The two
    versions are torch's own, read from its version-counter check's message ("is at version
    2; expected version 1"); None where the message did not say."""

    def __init__(self, saved_version: int | None = None, version: int | None = None):
        self.saved_version, self.version = saved_version, version

    def __repr__(self) -> str:
        return "<modified in place>"


_FREED = _Freed()
FREED = _FREED
_VERSIONS = re.compile(r"is at version (\d+); expected version (\d+) instead")


def _unreadable(exc: RuntimeError):
    """Why a saved value cannot be read: freed by an earlier backward, or changed in place
    (torch's version-counter check, which reading it runs too)."""
    text = str(exc)
    if "inplace operation" not in text:
        return _FREED
    m = _VERSIONS.search(text)
    return Modified(int(m.group(2)), int(m.group(1))) if m else Modified()


def is_custom_function_node(fn: Any) -> bool:
    """A node of an `autograd.Function` the script (or a library it uses) wrote; not one
    torch applies itself (a module's full backward hook runs through torch's own
    BackwardHookFunction, which is not the script's custom Function to draw and gradcheck)."""
    return isinstance(fn, torch.autograd.function.BackwardCFunction) and \
        not is_torchs_own(forward_class(fn))


def is_torchs_own(cls: Any) -> bool:
    """A class torch defines (its module is torch or under it)."""
    module = getattr(cls, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def forward_class(fn: Any) -> type | None:
    """The `autograd.Function` subclass whose `apply` created this node."""
    return getattr(fn, "_forward_cls", None)


def is_grad_getter(func: Any) -> bool:
    """True for the function a TorchFunctionMode sees when code reads `tensor.grad`."""
    return getattr(func, "__self__", None) is torch._C.TensorBase.grad and (
        getattr(func, "__name__", "") == "__get__"
    )


def is_inplace_call(name: str) -> bool:
    """Does a torch call of this name write into its first argument (`mul_`, `__iadd__`,
    `__setitem__`)?"""
    return (name.endswith("_") and not name.startswith("__")) or name == "__setitem__" or (
        name.startswith("__i") and name.endswith("__"))


def is_detach_call(name: str) -> bool:
    """Does a torch call of this name return its argument cut from the graph?"""
    return name in ("detach", "detach_")


def is_requires_grad_call(name: str) -> bool:
    """Is this the in-place switch of a tensor's requires_grad (`t.requires_grad_(False)`)?"""
    return name == "requires_grad_"


def accumulated_leaf(fn: Any) -> Any:
    """The leaf tensor an AccumulateGrad node adds gradients into, or None for other nodes."""
    return getattr(fn, "variable", None) if type(fn).__name__ == "AccumulateGrad" else None


def function_apply() -> Any:
    """The plain function behind `torch.autograd.Function.apply` (a classmethod), so that it
    can be wrapped and put back."""
    return torch.autograd.Function.__dict__["apply"].__func__


# Backward nodes of ops whose output is a view of their input: a parameter read through one of
# these (w.t(), w.view(...)) still has its edge, whatever line made the view.
_VIEW_NODES = ("TBackward", "TransposeBackward", "PermuteBackward", "ViewBackward",
               "UnsafeViewBackward", "ReshapeAliasBackward", "ExpandBackward", "SliceBackward",
               "SelectBackward", "SqueezeBackward", "UnsqueezeBackward", "AsStridedBackward",
               "AliasBackward", "NarrowBackward", "DiagonalBackward", "UnbindBackward",
               "SplitBackward", "ChunkBackward")


def is_view_node(name: str) -> bool:
    """Is a grad_fn of this class name the backward of a view (its output aliases its input)?"""
    return name.startswith(_VIEW_NODES)


# Calls under no_grad that are not uses: property access (`.data` read or written).
_ACCESSORS = ("__get__", "__set__")


def is_update_call(name: str) -> bool:
    """Does a torch call of this name change a tensor in place (`add_`, `__iadd__`) or access
    it (`__get__`) rather than compute from it? Under no_grad those are initialisation or a
    hand-written update, not a use that leaves the graph."""
    return name.endswith("_") or name.startswith("__i") or name in _ACCESSORS


def in_backward_pass() -> bool:
    """Is the autograd engine running a backward in this thread now (a call made from inside
    it: a reentrant checkpoint's backward, a hook)?"""
    return torch._C._current_graph_task_id() != -1


def is_requires_grad_setter(func: Any) -> bool:
    """True for the function a TorchFunctionMode sees when code sets `tensor.requires_grad`
    (an attribute, not the `requires_grad_` call)."""
    return getattr(func, "__self__", None) is torch._C.TensorBase.requires_grad and (
        getattr(func, "__name__", "") == "__set__"
    )


def is_data_getter(func: Any) -> bool:
    """True for the function a TorchFunctionMode sees when code reads `tensor.data`."""
    return getattr(func, "__self__", None) is torch._C.TensorBase.data and (
        getattr(func, "__name__", "") == "__get__"
    )


def plain_tensor(t: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
    """`t` as an ordinary tensor, read inside a torch.func transform: itself when nothing wraps
    it; the first sample of the batch (and True) when one vmap level does; None when a grad
    level or several levels wrap it (its value is not one tensor of the script's)."""
    functorch = torch._C._functorch
    if not functorch.is_functorch_wrapped_tensor(t):
        return t, False
    if functorch.is_batchedtensor(t):
        inner = functorch.get_unwrapped(t)
        if not functorch.is_functorch_wrapped_tensor(inner):
            return inner.select(functorch.maybe_get_bdim(t), 0), True
    return None, False


def is_transform_wrapper(t: torch.Tensor) -> bool:
    """Is `t` a tensor a torch.func transform made to stand for one of the script's inside it
    (a grad level's or a vmap batch's wrapper), rather than a tensor of the script's?"""
    return torch._C._functorch.is_functorch_wrapped_tensor(t)


def compiled_original(module: Any) -> Any:
    """The module `torch.compile(module)` wrapped, for its wrapper (dynamo's OptimizedModule,
    which holds it as `_orig_mod`); None for any other module. Checked by class name: importing
    dynamo to compare classes costs a second."""
    cls = type(module)
    if cls.__name__ == "OptimizedModule" and cls.__module__ == "torch._dynamo.eval_frame":
        original = getattr(module, "_orig_mod", None)
        return original if isinstance(original, torch.nn.Module) else None
    return None


def compiled_region_of(fn: Any) -> int | None:
    """The AOTAutograd id of the compiled region whose backward this node runs, for a
    `CompiledFunctionBackward` node: AOTAutograd defines a `CompiledFunction` class per region,
    holding its `_aot_id`, the id its fw/bw compilers saw (`aot_graph`)."""
    if type(fn).__name__ != "CompiledFunctionBackward":
        return None
    aot_id = getattr(forward_class(fn), "_aot_id", None)
    return aot_id if isinstance(aot_id, int) and not isinstance(aot_id, bool) else None


def aot_graph() -> tuple[int, str] | None:
    """The graph AOTAutograd is compiling now, as (aot_id, "forward" | "backward" |
    "inference"): it names it "{aot_id}_{kind}" for its compilers' logs."""
    try:
        from torch._functorch._aot_autograd.logging_utils import get_aot_compilation_context
        names = get_aot_compilation_context()[0]
    except Exception:  # noqa: BLE001 - a torch without it: the graph is not kept
        return None
    match = re.fullmatch(r"(\d+)_(\w+)", names[0]) if names else None
    return (int(match.group(1)), match.group(2)) if match else None


def aot_eager_capturing(on_graph: Any) -> Any:
    """torch's "aot_eager" backend, the same (its min-cut partition, its `boxed_nop`
    compilers, so the same graphs run), with `on_graph(kind, aot_id, fx_graph_module)` told
    of each forward and backward graph AOTAutograd hands its compilers. The backward is compiled
    when it first runs (AOTAutograd's lazy backward). Dynamo is imported only when it compiles
    (importing it costs a second a run that never compiles would pay)."""

    def compiler(gm: Any, example_inputs: Any) -> Any:
        from torch._dynamo.backends.debugging import boxed_nop

        where = aot_graph()
        if where is not None and where[1] in ("forward", "backward"):
            try:
                on_graph(where[1], where[0], gm)
            except Exception:  # noqa: BLE001 - what is kept never stops the script
                pass
        return boxed_nop(gm, example_inputs)

    def backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs, fw_compiler=compiler, bw_compiler=compiler,
                         **kwargs)

    backend.__name__ = "aot_eager"
    return backend
