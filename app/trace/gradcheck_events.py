"""The script's gradcheck and gradgradcheck calls, recorded as events.

torch's check runs hundreds of backward passes of its own (analytical Jacobians, row by row,
against finite differences); those stay torch's and are not drawn. What is drawn is one pass
that stands for them: the checked function run once on copies of the inputs, and
`torch.autograd.grad` from its outputs (gradients of ones) back to those copies, with the
check's verdict and tolerances in the event's `gradcheck`. For gradgradcheck the pass asks for
`create_graph=True`: the graph that gradient carries is what gradgradcheck differentiates.

The copies keep the script's tensors as they were (their values, `.grad` and hooks); the pass
runs with the random stream forked and the buffers of every module it runs put back after it
(BatchNorm's running statistics and batch count), and what it prints is not shown: the check's
verdict, or the GradcheckError it raises, is the script's unchanged. What cannot be put back is
what the function itself does in Python: it is called once more than the check called it, so a
counter of its own calls, a list it appends to, a forward hook of the script's on a module it
runs, or a file it writes sees one call more than an untraced run.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError

from app.format import clip, diagnostic

from .backward_event import tensors_of
from .func_forward import buffers_kept, rng_forked
from .recorder import Recorder

__all__ = ["checked_calls", "gradcheck_findings", "representative_call"]

CHECKS = {"gradcheck": "torch.autograd.gradcheck",
          "gradgradcheck": "torch.autograd.gradgradcheck"}
MAX_MESSAGE = 2000
# passes drawn for checks in one run: the script's own backward passes keep the rest of the
# run's recorded passes (RecordingLimits.max_backward_events)
MAX_CHECK_EVENTS = 5


@dataclass
class _Drawn:
    """The checks drawn so far: one pass per check and line, another only when the verdict
    there changes (a check in a loop is one event that counts its calls, not ten events), at
    most MAX_CHECK_EVENTS."""
    # (check, line, function) -> the event's `gradcheck`
    last: dict[tuple[str, int | None, str], dict] = field(default_factory=dict)
    count: int = 0

    def repeats(self, key: tuple[str, int | None, str], passed: bool) -> bool:
        """The same check of the same function at a line already drawn, with the same
        verdict: counted there."""
        found = self.last.get(key)
        if found is None or found["passed"] is not passed:
            return False
        found["calls"] += 1
        return True

    def room(self, recorder: Recorder) -> bool:
        return self.count < MAX_CHECK_EVENTS and \
            recorder.backward_count() < recorder.limits.max_backward_events

    def drew(self, key: tuple[str, int | None, str], found: dict) -> None:
        self.last[key] = found
        self.count += 1


def representative_call(check: str) -> str:
    """The event's call: what the script called, and that the event is one pass for it."""
    return f"{CHECKS[check]} (one representative pass)"


def checked_calls(recorder: Recorder, *, called_by_torch: Callable[[], bool],
                  argument: Callable[[Any, tuple, dict, str], Any]
                  ) -> list[tuple[Any, str, Any]]:
    """(owner, name, replacement) for gradcheck and gradgradcheck wherever torch keeps them:
    on torch.autograd and on its module torch.autograd.gradcheck (whose name on torch.autograd
    is the function), so `from torch.autograd import gradcheck` after this gets the recording
    one, and gradgradcheck's own call of gradcheck meets it too (and is left to torch).

    `called_by_torch` and `argument` are intercept.py's: whether the wrapper's caller is
    torch's own code, and the value an argument has in a call, its default if not given."""
    module = importlib.import_module("torch.autograd.gradcheck")
    drawn = _Drawn()
    found = []
    for check in CHECKS:
        original = getattr(module, check, None)
        if not callable(original):
            continue
        wrapper = _wrap(recorder, drawn, check, original, argument, called_by_torch)
        found.extend((owner, check, wrapper) for owner in (torch.autograd, module)
                     if getattr(owner, check, None) is original)
    return found


def _wrap(recorder: Recorder, drawn: _Drawn, check: str, original: Any, argument: Any,
          called_by_torch: Any) -> Any:
    @functools.wraps(original)
    def checked(*args, **kwargs):
        # our own checks (custom_check.py) run quiet; gradgradcheck calls gradcheck itself
        if recorder.busy or called_by_torch():
            return original(*args, **kwargs)
        line = recorder.current_line()
        try:
            passed = original(*args, **kwargs)
        except GradcheckError as exc:
            _record_safely(recorder, drawn, check, original, argument, args, kwargs, line,
                           False, exc)
            raise
        _record_safely(recorder, drawn, check, original, argument, args, kwargs, line,
                       bool(passed), None)
        return passed

    return checked


def _record_safely(recorder: Recorder, drawn: _Drawn, check: str, original: Any,
                   argument: Any, args: tuple, kwargs: dict, line: int | None, passed: bool,
                   error: GradcheckError | None) -> None:
    """The check's event; whatever goes wrong here is ours, said as a tracer error, and the
    script goes on with the check's own answer."""
    try:
        def given(name: str) -> Any:
            return argument(original, args, kwargs, name)

        function = _function_name(given("func"))
        if drawn.repeats((check, line, function), passed):
            return
        before = len(recorder.events)
        if drawn.room(recorder):
            _representative_pass(recorder, check, given("func"), given("inputs"))
        event = next((e for e in recorder.events[before:] if e["kind"] == "backward"), None)
        if event is None:  # past the passes drawn for checks, or nothing to differentiate
            recorder.saw_unrecorded(CHECKS[check])
            # its verdict is still the script's to know: said in the line's note
            said = recorder.check_verdicts.setdefault(line, {})
            said[function] = said.get(function, True) and passed
            return
        event["gradcheck"] = {
            "check": check, "passed": passed, "message": _message(check, passed, error),
            "eps": _number(given("eps")), "atol": _number(given("atol")),
            "rtol": _number(given("rtol")), "function": function,
            "line": line if isinstance(line, int) and line > 0 else None, "calls": 1}
        drawn.drew((check, line, function), event["gradcheck"])
    # never break the script for our bookkeeping; a sys.exit() in the function's extra call
    # is ours too (the check itself called it without one)
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        recorder._internal_error(f"recording a {check} call", exc)


def _representative_pass(recorder: Recorder, check: str, func: Any, inputs: Any) -> None:
    if not callable(func):
        return
    given = inputs if isinstance(inputs, tuple) else tuple(inputs) \
        if isinstance(inputs, list) else (inputs,)  # as gradcheck reads them
    with recorder.guard():  # the copying is ours: not a `detach()` of the script's
        copies = tuple(_copy(a) for a in given)
    wrt = [c for c in copies if isinstance(c, torch.Tensor) and c.requires_grad]
    if not wrt:
        return
    double = check == "gradgradcheck"
    sink = io.StringIO()  # the function's prints are the check's, already made once each
    standing = [(c, a, i) for i, (c, a) in enumerate(zip(copies, given, strict=True), 1)
                if isinstance(c, torch.Tensor) and c.requires_grad]
    with recorder.guard():
        recorder.namer.refresh()  # the script's names for its inputs, before they stand in
    # the copies stand in from the forward on: a module the function calls makes the namer
    # look at its frame, whose arguments are then our copies (they were named `inp#2`)
    with rng_forked(), buffers_kept([], recorder.guard), torch.enable_grad(), \
            contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
            recorder.namer.standing_in(standing):
        outputs = [t for t in tensors_of(func(*copies)) if t.requires_grad]
        if not outputs:
            return
        with recorder.guard():
            ones = [torch.ones_like(t) for t in outputs]
        with contextlib.suppress(Exception):
            # a backward that fails here is the function's: its event says how
            recorder.around_backward(
                representative_call(check), outputs,
                lambda: torch.autograd.grad(outputs, wrt, ones, allow_unused=True,
                                            create_graph=double),
                returns_grads=True, create_graph=double, inputs=wrt)


def _copy(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    copy = x.detach().clone()
    if x.requires_grad and (copy.is_floating_point() or copy.is_complex()):
        copy.requires_grad_(True)
    return copy


def _message(check: str, passed: bool, error: GradcheckError | None) -> str:
    what = "backward" if check == "gradcheck" else "the derivative of backward"
    if passed:
        return f"{what} matches finite differences"
    if error is None:
        return (f"{what} does not match finite differences (raise_exception=False: torch "
                "returns False without saying where)")
    lines = str(error).strip().splitlines()
    return clip(lines[0].rstrip(",:") if lines else type(error).__name__, MAX_MESSAGE)


def _number(x: Any) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _function_name(func: Any) -> str:
    """The checked function's name: a custom Function's class for `Cube.apply`."""
    owner = getattr(func, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        return clip(owner.__qualname__, 1000)
    if inspect.isbuiltin(func) and getattr(func, "__module__", None) == "torch":
        return f"torch.{func.__name__}"  # torch.sin, not _VariableFunctionsClass.sin
    name = getattr(func, "__qualname__", None)
    return clip(name if isinstance(name, str) else type(func).__qualname__, 1000)


def gradcheck_findings(events: list[dict]) -> list[dict]:
    """One finding per recorded check: its verdict, and what its event draws."""
    out = []
    for e in events:
        found = e.get("gradcheck")
        if e["kind"] != "backward" or not found:
            continue
        where = f"at line {found['line']}" if found["line"] else "in the script"
        tolerances = ", ".join(f"{k} {found[k]:g}" for k in ("eps", "atol", "rtol")
                               if found.get(k) is not None)
        calls = found.get("calls", 1)
        details = "; ".join(([f"{calls} calls at this line"] if calls > 1 else []) +
                            ([tolerances] if tolerances else []))
        verdict = ("passed" if found["passed"] else "failed") + \
            (f" ({details})" if details else "")
        out.append(diagnostic(
            f"{found['check']}_call", "info" if found["passed"] else "warning",
            f"`{CHECKS[found['check']]}` of `{found['function']}` {where} {verdict}: "
            f"{found['message']}. Backward #{e['index']} draws one "
            "representative pass: the function run once on copies of its inputs and "
            "torch.autograd.grad back to them; the check's own backward passes inside torch "
            "are not drawn.", event=e["index"]))
    return out
