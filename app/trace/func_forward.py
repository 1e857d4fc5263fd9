"""The forward graph of a function a torch.func transform differentiates, drawn from one
ordinary call of it after the script has ended.

torch.func computes gradients without a grad_fn graph of the script's (its notes say so: see
`diagnose._not_drawn`). What the transform differentiates is an ordinary function, though:
called once on plain tensors that require grad, it builds the graph a backward() would walk.
The first call of each transformed function with ordinary tensors (or under one `vmap`, the
first sample of its batch) is remembered, as copies; after the script, the function is called
once on those copies, with the random state and the buffers of every module it runs (and of
every module the script holds) put back, nothing recorded as the script's, and its output's
graph kept as a view (`func_forward`). Anything that fails is dropped: the note stays as it is.
Not drawn: transforms nested inside another transform's grad level, calls whose arguments
hold tensors the copy cannot read (sparse, meta), and calls whose arguments are too big to keep
a copy of (MAX_REMEMBERED_BYTES). What cannot be put back is what the function does in Python
(a counter of its calls counts one more; its prints are not shown).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.overrides import TorchFunctionMode

from app.format import clip

from . import _internals as internals
from .backward_event import tensors_of

__all__ = ["FuncCalls", "DRAWN", "buffers_kept", "rng_forked"]

# transforms that return the function transformed; vjp differentiates at once
DRAWN = {"torch.func.grad", "torch.func.grad_and_value", "torch.func.jacrev",
         "torch.func.jacfwd", "torch.func.hessian", "torch.func.vjp"}
MAX_DRAWN = 5  # transformed functions drawn per run
MAX_OUTPUTS = 20  # output tensors of one call drawn as roots
# the copies stay until the script ends, inside the run's memory limit: `grad(loss)(params,
# X_full)` on a whole data set would hold it twice. Past this (all remembered calls together)
# a call is not remembered and its note stays without a picture; the graph's shape, which is
# what the view shows, needs no big batch
MAX_REMEMBERED_BYTES = 64 * 1024 * 1024
_SCRIPTS_FUNCTION = "_autograd_lab_function"  # the script's function behind a transformed one


class _Unreadable(Exception):
    """An argument that is not one ordinary tensor of the script's."""


@dataclass
class _Call:
    call: str
    line: int | None
    function: Any
    args: tuple
    kwargs: dict
    argnums: Any  # int, tuple of ints, or None: every positional argument
    sampled: bool


class FuncCalls:
    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.calls: list[_Call] = []
        self._lines: set[tuple[int | None, str]] = set()
        self.drawn_lines: set[int | None] = set()
        self.remembered_bytes = 0

    def wrap(self, transform: Any, call: str) -> Any:
        """`transform` (torch.func.grad, ...), remembering the first ordinary call of what it
        transforms; any other call is `transform` itself."""
        if call not in DRAWN:
            return transform
        recorder = self.recorder

        @functools.wraps(transform)
        def transformed(func, *args, **kwargs):
            result = transform(func, *args, **kwargs)
            if torch.compiler.is_compiling() or recorder.busy or not callable(func):
                return result
            try:
                line = recorder.current_line()
                if line is None:  # torch's own use of the transform
                    return result
                scripts = getattr(func, _SCRIPTS_FUNCTION, func)
                if call == "torch.func.vjp":
                    self._remember(call, line, scripts, args, {}, None)
                    return result
                argnums = _argument(transform, (func, *args), kwargs, "argnums", 0)
            except Exception as exc:  # noqa: BLE001 - never break the script for a picture
                recorder._internal_error("remembering a torch.func call", exc)
                return result
            if not callable(result):
                return result

            @functools.wraps(result)
            def remembering(*a, **kw):
                if (line, call) not in self._lines:
                    self._remember(call, line, scripts, a, kw, argnums)
                return result(*a, **kw)

            setattr(remembering, _SCRIPTS_FUNCTION, scripts)
            return remembering

        return transformed

    def _remember(self, call: str, line: int | None, function: Any, args: tuple, kwargs: dict,
                  argnums: Any) -> None:
        if (line, call) in self._lines or self.recorder.busy:
            return
        if len(self.calls) >= MAX_DRAWN:
            self._passed_over(line, f"a run draws the first {MAX_DRAWN} such functions")
            return
        sampled: list[bool] = []
        try:
            size = _bytes((args, kwargs))
            if self.remembered_bytes + size > MAX_REMEMBERED_BYTES:
                # a later, smaller call at the line may still be remembered
                self._passed_over(line, f"its arguments take more than the "
                                  f"{MAX_REMEMBERED_BYTES >> 20} MB autograd-lab copies to "
                                  "draw it")
                return
            with self.recorder.guard():
                copied = _copy(args, sampled), _copy(kwargs, sampled)
        except _Unreadable:
            return
        except Exception as exc:  # noqa: BLE001
            self.recorder._internal_error("copying a torch.func call's arguments", exc)
            return
        self._lines.add((line, call))
        self.remembered_bytes += size
        self.calls.append(_Call(call, line, function, copied[0], copied[1], argnums,
                                any(sampled)))

    def _passed_over(self, line: int | None, why: str) -> None:
        """Said in the line's not_drawn note (diagnose.py), unless a later call is drawn."""
        self.recorder.func_passed_over.setdefault(line, why)

    def draw(self, namespace: dict) -> None:
        """Call each remembered function once, and keep its graph as a view."""
        for c in self.calls:
            try:
                if self._draw(c, namespace):
                    self.drawn_lines.add(c.line)
            # the function's sys.exit() on this extra call ends a picture, not the report
            except (Exception, SystemExit):  # noqa: BLE001, S112 - a picture left out
                continue

    def _draw(self, c: _Call, namespace: dict) -> bool:
        recorder = self.recorder
        params = _parameter_names(namespace)
        names: dict[int, tuple[str, str]] = {}
        wanted = _positions(c.argnums, len(c.args))
        try:
            labels = list(inspect.signature(c.function).parameters)
        except (TypeError, ValueError):
            labels = []
        args = tuple(_leaves(a, labels[i] if i < len(labels) else f"arg{i}", i in wanted,
                             names, params) for i, a in enumerate(c.args))
        kwargs = {k: _leaves(v, k, False, names, params) for k, v in c.kwargs.items()}
        modules = [m for m in namespace.values() if isinstance(m, nn.Module)]
        with contextlib.ExitStack() as stack:
            stack.enter_context(recorder.quiet())
            stack.enter_context(torch.enable_grad())
            stack.enter_context(rng_forked())
            stack.enter_context(buffers_kept(modules))
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
            stack.enter_context(_Tagging(recorder))
            out = c.function(*args, **kwargs)
        roots = [t for t in tensors_of(_flat(out)) if t.grad_fn is not None][:MAX_OUTPUTS]
        if not roots:
            return False
        name = getattr(c.function, "__name__", None) or "function"
        label = (f"{name}, the function {c.call} differentiates, drawn from one ordinary call"
                 + (" on the first sample of vmap's batch" if c.sampled else ""))
        outputs = [(t, "output" if len(roots) == 1 else f"output[{i}]")
                   for i, t in enumerate(roots)]
        return recorder.views.drawn("func_forward", c.call, c.line, label, outputs,
                                    names) is not None


def _argument(function: Any, args: tuple, kwargs: dict, name: str, default: Any) -> Any:
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return default
    bound.apply_defaults()
    return bound.arguments.get(name, default)


def _positions(argnums: Any, count: int) -> set[int]:
    if argnums is None:
        return set(range(count))
    if isinstance(argnums, int):
        argnums = (argnums,)
    try:
        return {a % count if count else a for a in argnums if isinstance(a, int)}
    except TypeError:
        return set()


def _copy(x: Any, sampled: list[bool]) -> Any:
    """`x` with every tensor an ordinary copy of its value; _Unreadable if one cannot be."""
    if isinstance(x, torch.Tensor):
        plain, sample = internals.plain_tensor(x)
        if plain is None or plain.is_sparse or plain.is_meta:
            raise _Unreadable
        sampled.append(sample)
        return plain.detach().clone()
    if isinstance(x, dict):
        return {k: _copy(v, sampled) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_copy(v, sampled) for v in x)
    return x


def _bytes(x: Any) -> int:
    """What copying `x` would take: each tensor as `_copy` reads it (one sample under vmap);
    _Unreadable where it cannot."""
    if isinstance(x, torch.Tensor):
        plain, _ = internals.plain_tensor(x)
        if plain is None or plain.is_sparse or plain.is_meta:
            raise _Unreadable
        return plain.numel() * plain.element_size()
    if isinstance(x, dict):
        return sum(_bytes(v) for v in x.values())
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return sum(_bytes(v) for v in x)
    return 0


def _leaves(x: Any, path: str, differentiated: bool, names: dict, params: set[str]) -> Any:
    """A fresh copy of remembered `x` for the call: tensors of the differentiated arguments
    require grad and are named by where they sit (a `functional_call` dict's keys name the
    model's parameters, as `named_parameters()` does)."""
    if isinstance(x, torch.Tensor):
        t = x.detach().clone()
        if differentiated and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
            # the script's dict keys: as long as it likes, so clipped like every name it gives
            names[id(t)] = (clip(path, 200), "parameter" if path in params else "leaf")
        return t
    if isinstance(x, dict):
        return {k: _leaves(v, str(k) if path_is_top(path) else f"{path}.{k}", differentiated,
                           names, params) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_leaves(v, f"{path}[{i}]", differentiated, names, params)
                       for i, v in enumerate(x))
    return x


def path_is_top(path: str) -> bool:
    """A dict given as a whole argument: its keys are the names (`weight`, not `p.weight`)."""
    return "[" not in path and "." not in path


def _parameter_names(namespace: dict) -> set[str]:
    return {n for m in namespace.values() if isinstance(m, nn.Module)
            for n, _ in m.named_parameters()}


def _flat(out: Any) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    return []


def rng_forked() -> contextlib.AbstractContextManager:
    """Random state put back afterwards: the CPU generator's, and the current CUDA device's
    once CUDA is in use (a script that never touched CUDA has no CUDA stream to move, and
    forking it would start CUDA)."""
    devices = [torch.cuda.current_device()] \
        if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return torch.random.fork_rng(devices=devices)


@contextlib.contextmanager
def buffers_kept(modules: list[nn.Module], ours: Callable[[], Any] = contextlib.nullcontext):
    """Every buffer of `modules` and of each module the call runs is as it was afterwards
    (BatchNorm's running statistics, its batch count). `ours` (the recorder's guard) keeps
    the copying and the putting back from being recorded as the script's operations."""
    saved: dict[int, tuple[nn.Module, list[tuple[str, torch.Tensor, torch.Tensor]]]] = {}

    def keep(m: nn.Module) -> None:
        if id(m) not in saved:
            with ours(), torch.no_grad():
                saved[id(m)] = (m, [(n, b, b.detach().clone())
                                    for n, b in m.named_buffers(recurse=False)])

    for top in modules:
        for m in top.modules():
            keep(m)
    handle = nn_module.register_module_forward_pre_hook(lambda m, args: keep(m))
    try:
        yield
    finally:
        handle.remove()
        with ours(), torch.no_grad():
            for m, buffers in saved.values():
                for name, buffer, value in buffers:
                    if getattr(m, name, None) is not buffer:
                        setattr(m, name, buffer)
                    buffer.copy_(value)


class _Tagging(TorchFunctionMode):
    """Tags the nodes the call makes with their script line and module, as the script's own
    ops are tagged, while the recorder itself records nothing (it is busy)."""

    def __init__(self, recorder: Any) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if torch.compiler.is_compiling():  # dynamo traces this mode: it adds nothing there
            return out
        try:
            self.recorder.tag_nodes(tensors_of(out))
        except Exception:  # noqa: BLE001, S110 - a node without its line is still drawn
            pass
        return out
