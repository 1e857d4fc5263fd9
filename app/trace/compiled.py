"""`torch.compile` in a traced run: the default backend swapped for one that needs no compiler.

Inductor, torch.compile's default backend, writes C++ and runs a compiler, which a sandboxed run
may not exec. For the run's duration `torch.compile` (and so `nn.Module.compile`, which calls it)
compiles with "aot_eager" instead wherever it would use Inductor (the default, or named: it cannot
run here either way): dynamo captures the graph and AOTAutograd splits it into forward and
backward as under inductor, and the graphs run as eager operations. Each such call is said in one
`compiled_with_aot_eager` diagnostic, with the Inductor settings (`mode`, `options`) it had to
drop. Any other backend the script names (eager, its own) is its own, failures too; "aot_eager",
named or given, is torch's own with its compilers wrapped, so that the graphs AOTAutograd makes
of each region are kept (`compiled_graphs.py`).

The tracer's hooks and TorchFunctionMode do nothing while dynamo traces
(`torch.compiler.is_compiling()`), so that a compiled region is one node of the eager graph
(AOTAutograd's `CompiledFunctionBackward`), as autograd sees it without autograd-lab. Where the
hooks run eagerly inside a compiled call (a module dynamo skips, the code around a graph break)
dynamo would also take each of their frames as a new function to compile (the mode's call of
`F.linear` became a graph of its own): `ours()` marks them as frames dynamo skips, with all they
call, as it skips torch's own files. A frame skip is not `torch.compiler.disable`, which would
break the script's graph wherever dynamo inlines the hook.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from app.format import diagnostic

from .compiled_graphs import RegionCapture

__all__ = ["CompileCalls", "SANDBOX_BACKEND", "ours", "skip_our_frames"]

SANDBOX_BACKEND = "aot_eager"
MAX_CALLS = 50  # compile calls said, each once; a loop compiling anew is said once per line
_DROPPED = ("mode", "options")  # Inductor's settings: aot_eager takes neither


def _default_backend() -> Any:
    try:
        from torch._dynamo.backends.registry import get_default_backend
    except ImportError:
        return "inductor"
    return get_default_backend()


_OUR_CODE: dict[types.CodeType, None] = {}  # the code of every hook and wrapper of ours


def ours(*functions: Callable) -> None:
    """Mark `functions` (hooks, the mode's `__torch_function__`, patched calls) as autograd-lab's
    own, for `skip_our_frames`; marked at once if dynamo is already loaded."""
    for f in functions:
        code = getattr(getattr(f, "__func__", f), "__code__", None)
        if code is not None:
            _OUR_CODE[code] = None
    skip_our_frames()


def skip_our_frames() -> None:
    """Dynamo leaves our frames alone, and all they call (as it leaves torch's own). Without
    dynamo loaded there is nothing to do (importing it costs a second): `torch.compile`, patched,
    calls this before it compiles."""
    if "torch._dynamo" not in sys.modules:
        return
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:  # a torch without it: dynamo may compile our frames (never wrongly)
        return
    for code in _OUR_CODE:
        set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))


class CompileCalls:
    """The script's torch.compile calls that got aot_eager instead of inductor, by line."""

    def __init__(self, current_line) -> None:
        self._current_line = current_line
        self.calls: dict[int | None, list[str]] = {}  # line -> the settings dropped there
        self.regions = RegionCapture()  # aot_eager's graphs, kept (compiled_graphs.py)

    @contextlib.contextmanager
    def patched(self):
        """`torch.compile` swapped for the run, put back afterwards whatever happens."""
        original = torch.compile

        @functools.wraps(original)
        def compile(model=None, *args, **kwargs):  # noqa: A001 - torch.compile's own name
            backend = kwargs.get("backend")
            if backend is None:
                backend = _default_backend()
            if isinstance(backend, str) and backend == "inductor":
                dropped = [k for k in _DROPPED if kwargs.get(k) is not None
                           and not (k == "mode" and kwargs[k] == "default")]
                for k in _DROPPED:
                    kwargs.pop(k, None)
                kwargs["backend"] = self.regions.backend  # aot_eager, its graphs kept
                self._saw(dropped)
            elif isinstance(backend, str) and backend == SANDBOX_BACKEND:
                kwargs["backend"] = self.regions.backend  # the same backend, its graphs kept
            skip_our_frames()
            return original(model, *args, **kwargs)

        torch.compile = compile
        try:
            yield self
        finally:
            torch.compile = original

    def _saw(self, dropped: list[str]) -> None:
        try:
            line = self._current_line()
        except Exception:  # noqa: BLE001 - the call is said without its line
            line = None
        if line not in self.calls and len(self.calls) < MAX_CALLS:
            self.calls[line] = []
        for k in dropped:
            if line in self.calls and k not in self.calls[line]:
                self.calls[line].append(k)

    def notes(self) -> list[dict]:
        out = []
        for line, dropped in self.calls.items():
            where = f"the torch.compile call at line {line}" if line else \
                "a torch.compile call"
            settings = " and ".join(f"`{k}`" for k in dropped)
            extra = ""
            if dropped:
                verb = "was" if len(dropped) == 1 else "were"
                extra = f" Its {settings}, Inductor's own, {verb} left out: aot_eager takes none."
            out.append(diagnostic(
                "compiled_with_aot_eager", "info",
                f"autograd-lab gave {where} the aot_eager backend instead of inductor, since "
                "the sandbox runs no compiler: whatever dynamo captures there is compiled by "
                "AOTAutograd as in PyTorch (a CompiledFunctionBackward node in the backward "
                "graph, its gradients PyTorch's own), without the kernels inductor would "
                f"generate.{extra}"))
        return out
