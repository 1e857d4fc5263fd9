"""gradcheck for every custom autograd.Function the script applied.

Run after the script, on a float64 copy of the first (small) inputs each Function saw, with the
script's output silenced: the check must not show up as the script's own prints.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import warnings

import torch
from torch.autograd.gradcheck import GradcheckError

from .recorder import Recorder

__all__ = ["check_custom_functions"]

_INPUT = re.compile(r"with respect to input (\d+)")


def _named_input(message: str, cls: type, inputs: tuple) -> str:
    """gradcheck numbers only the inputs that require grad ("input 0" of f(k, x) is x): the
    input named as the Function's forward names it, and its place among all of them."""
    m = _INPUT.search(message)
    if m is None:
        return message
    places = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.requires_grad]
    k = int(m.group(1))
    if k >= len(places):
        return message
    try:
        names = list(inspect.signature(cls.forward).parameters)[1:]  # after ctx
    except (TypeError, ValueError):
        names = []
    place = places[k]
    name = f"`{names[place]}`, " if place < len(names) and not names[place].startswith("*") \
        else ""
    return message[:m.end()] + f" ({name}forward's argument {place + 1})" + message[m.end():]


def check_custom_functions(recorder: Recorder) -> dict[type, dict]:
    """gradcheck for each Function; gradgradcheck too (`double`) for one whose backward
    returned a gradient with no graph under create_graph=True: is its second derivative
    really zero, or did its backward cut the graph?"""
    results: dict[type, dict] = {}
    for cls, args in recorder.custom_inputs().items():
        results[cls] = _check(recorder, cls, args)
        if cls in recorder.cut_functions:
            results[cls]["double"] = _check(recorder, cls, args, double=True)
    return results


def _check(recorder: Recorder, cls: type, args: tuple, double: bool = False) -> dict:
    inputs = tuple(
        a.detach().to(torch.float64).requires_grad_(a.requires_grad)
        if isinstance(a, torch.Tensor) and a.is_floating_point() else a
        for a in args)
    if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in inputs):
        return {"passed": None, "message": "no input requires grad; nothing to check"}
    sink = io.StringIO()
    try:
        with recorder.quiet(), torch.enable_grad(), contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check = torch.autograd.gradgradcheck if double else torch.autograd.gradcheck
            passed = check(lambda *xs: cls.apply(*xs), inputs, eps=1e-6, atol=1e-4,
                           raise_exception=True)
        what = "the derivative of backward" if double else "backward"
        return {"passed": bool(passed), "message": f"{what} matches finite differences"}
    except GradcheckError as exc:
        first = str(exc).strip().splitlines()[0].rstrip(",:") if str(exc).strip() else "mismatch"
        first = _named_input(first, cls, inputs)
        what = "the derivative of backward" if double else "backward"
        return {"passed": False, "message": f"{what} disagrees with finite differences: {first}"}
    except Exception as exc:  # noqa: BLE001 - a Function gradcheck cannot run is reported, not fatal
        return {"passed": None, "message": f"gradcheck could not run: {type(exc).__name__}: {exc}"}
