"""Every private PyTorch internal the tracer touches, in one module.

`tests/trace/test_internals.py` exercises each of these against the installed torch, so a torch
upgrade that renames or removes one fails loudly there rather than quietly emptying the page.
"""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = [
    "node_metadata",
    "creation_stack",
    "creation_line",
    "saved_values",
    "forward_class",
    "input_shapes",
    "is_data_getter",
    "is_custom_function_node",
]

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)')
_SAVED_PREFIX = "_saved_"
_saved_attrs_by_type: dict[type, tuple[str, ...]] = {}


def node_metadata(fn: Any) -> dict:
    """The per-node dict that anomaly mode fills (`traceback_`) and that we tag (module path)."""
    return fn.metadata


def creation_stack(fn: Any) -> list[tuple[str, int, str]]:
    """(file, line, function) of each frame that created `fn`, outermost first.

    Anomaly mode stores the formatted forward stack under `traceback_` (a list of strings in
    torch 2.x, one string in older releases).
    """
    raw = node_metadata(fn).get("traceback_")
    if raw is None:
        return []
    text = "".join(raw) if isinstance(raw, list) else str(raw)
    return [(m["file"], int(m["line"]), m["func"].strip()) for m in _FRAME.finditer(text)]


def creation_line(fn: Any, path: str) -> int | None:
    """The innermost line of file `path` in the stack that created `fn` (fast path of
    creation_stack: big graphs ask this of every node)."""
    raw = node_metadata(fn).get("traceback_")
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


def saved_values(fn: Any) -> list[tuple[str, Any]]:
    """(name, value) of what a node saved for backward.

    Built-in nodes expose `_saved_<name>` attributes; a custom Function's node exposes
    `saved_tensors`. Reading a freed value raises RuntimeError ("freed"), and so does reading
    one modified in place since ("modified").
    """
    if is_custom_function_node(fn):
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
        try:
            value = getattr(fn, attr)
        except RuntimeError as exc:
            value = _unreadable(exc)
        out.append((attr[len(_SAVED_PREFIX):], value))
    return out


class _Freed:
    def __repr__(self) -> str:
        return "<freed>"


class _Modified:
    def __repr__(self) -> str:
        return "<modified in place>"


_FREED = _Freed()
FREED = _FREED
# A saved tensor changed in place since it was saved: backward will refuse it.
MODIFIED = _Modified()


def _unreadable(exc: RuntimeError):
    """Why a saved value cannot be read: freed by an earlier backward, or changed in place
    (torch's version-counter check, which reading it runs too)."""
    return MODIFIED if "inplace operation" in str(exc) else _FREED


def is_custom_function_node(fn: Any) -> bool:
    return isinstance(fn, torch.autograd.function.BackwardCFunction)


def forward_class(fn: Any) -> type | None:
    """The `autograd.Function` subclass whose `apply` created this node."""
    return getattr(fn, "_forward_cls", None)


def input_shapes(fn: Any) -> list[list[int] | None]:
    """Shape of each gradient the node receives (one per forward output)."""
    try:
        return [list(m.shape) for m in fn._input_metadata]
    except Exception:  # noqa: BLE001 - nested tensors and odd metadata have no plain shape
        return []


def is_data_getter(func: Any) -> bool:
    """True for the function a TorchFunctionMode sees when code reads `tensor.data`."""
    return getattr(func, "__self__", None) is torch._C.TensorBase.data and (
        getattr(func, "__name__", "") == "__get__"
    )
