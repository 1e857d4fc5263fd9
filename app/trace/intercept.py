"""Route the script's autograd calls to the recorder, and put everything back afterwards.

Intercepted: `Tensor.backward`, `torch.autograd.backward`, `torch.autograd.grad`, every
optimizer's `step` (through torch's global step hooks), every module call (global forward
hooks), `Function.apply`, and every torch operation (a TorchFunctionMode), with anomaly-mode
metadata on so each node knows the script line that created it. Calls that compute gradients
without a graph this tracer records (`torch.func` transforms, forward-mode AD,
`torch.autograd.functional`, torchviz's `make_dot_from_trace`) are only noted, with their line
(`UNRECORDED`). `torchviz.make_dot` calls are recorded as views (`views.py`). A module of
theirs not imported yet (torchviz, 0.13 s) is not imported for the run: it is patched the moment
the script imports it (`on_import.py`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module
from torch.overrides import TorchFunctionMode

from . import _internals as internals
from .backward_event import tensors_of
from .compiled import ours
from .func_forward import FuncCalls
from .gradcheck_events import checked_calls
from .hooks import KINDS
from .on_import import on_import
from .recorder import Recorder
from .views import keep_picture_local

__all__ = ["instrumented"]

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _called_by_torch() -> bool:
    """True when torch's own code (gradcheck, say) made the call that reached our wrapper:
    those passes are torch's business, not the script's.

    Our TorchFunctionMode hands torch.autograd.grad (this wrapper, since it is patched) back
    to itself from inside torch's dispatch: its frames are skipped to find the real caller.
    """
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR)


# a tensor's hook registrations, as a TorchFunctionMode sees them: each hook is counted per
# pass (hooks.py); two identity checks per operation
_TENSOR_HOOK_CALLS = ((torch.Tensor.register_hook, "register_hook"),
                      (torch.Tensor.register_post_accumulate_grad_hook,
                       "register_post_accumulate_grad_hook"))


# what after_op may still note inside an optimizer's step (grad off): a read of `.data` or
# `.grad`, `detach()`, a switch of requires_grad, a hook's registration
_NOTED_IN_STEP = frozenset({"__get__", "__set__", "detach", "detach_", "requires_grad_",
                            *(call for _registrar, call in _TENSOR_HOOK_CALLS)})


class _OpMode(TorchFunctionMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.recorder._busy:
            # the recorder's own operations (a pass's statistics, the optimizer rules' checks:
            # most of the mode's calls in a kept pass) note nothing: after_op and counted_hook
            # would return at once, after is_compiling and the hook checks had been paid
            return func(*args, **kwargs)
        if torch.compiler.is_compiling():  # dynamo traces this mode: it adds nothing there
            return func(*args, **kwargs)
        memory = self.recorder.forward_memory
        if memory.on:  # its profiler's record grows with each: counted, and bounded
            memory.operation()
        if self.recorder._in_step and not torch.is_grad_enabled() and \
                getattr(func, "__name__", "") not in _NOTED_IN_STEP:
            # an optimizer's own arithmetic (1,000 of an encoder step's 1,650 operations):
            # with no graph made and the step's no_grad not the script's, after_op notes
            # nothing of it (counted above all the same)
            return func(*args, **kwargs)
        for registrar, call in _TENSOR_HOOK_CALLS:
            if func is registrar:
                args, kwargs = _counted_args(self.recorder, call, args, kwargs)
        # until a pass's forward begins: is this its first recorded operation?
        candidate = memory.waiting and \
            self.recorder.before_op((*args, kwargs) if kwargs else args)
        out = func(*args, **kwargs)
        if candidate:
            self.recorder.after_candidate(out)
        try:
            self.recorder.after_op(func, args, kwargs, out)
        except MemoryError:
            raise  # the script is out of memory at this line, ours or not: it says so
        except Exception as exc:  # noqa: BLE001 - never break the script for our bookkeeping
            self.recorder._internal_error("watching an operation", exc)
        return out


def _innermost(mode: TorchFunctionMode) -> bool:
    """Is `mode` the innermost TorchFunctionMode now (not popped for its own dispatch, and no
    mode the script entered after it)?"""
    depth = torch._C._len_torch_function_stack()
    return depth > 0 and torch._C._get_function_stack_at(depth - 1) is mode


def _leave(depth: int) -> None:
    """Pop torch's mode stack back to `depth`, as it was before ours: ours, and the modes a
    script entered and never left (one that failed inside `with torch.device(...)`). An exit
    pops whichever mode is innermost: ours was left on in the process that traced it."""
    while torch._C._len_torch_function_stack() > depth:
        torch._C._pop_torch_function_stack()


def _counting_registrar(recorder: Recorder, call: str) -> Callable:
    """nn.Module's `call` (a backward hook's registration), with the hook counted per pass."""
    original = getattr(torch.nn.Module, call)

    @functools.wraps(original)
    def register(self, hook, *args, **kwargs):
        return original(self, recorder.counted_hook(KINDS[call], hook, self), *args, **kwargs)
    return register


def _counted_args(recorder: Recorder, call: str, args: tuple, kwargs: dict
                  ) -> tuple[tuple, dict]:
    """A hook registration's arguments with the hook counted (`tensor.register_hook(hook)`)."""
    if len(args) > 1:
        return (args[0], recorder.counted_hook(KINDS[call], args[1], args[0]), *args[2:]), kwargs
    if "hook" in kwargs and args:
        return args, {**kwargs, "hook": recorder.counted_hook(KINDS[call], kwargs["hook"],
                                                             args[0])}
    return args, kwargs


# (module, attribute, how the note names it): computed by the script, never drawn
UNRECORDED = [
    ("torch.func", name, f"torch.func.{name}") for name in
    ("grad", "grad_and_value", "vmap", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
     "linearize")
] + [
    # the legacy namespace, the same transforms under other objects: said as torch.func's
    ("functorch", name, f"torch.func.{name}") for name in
    ("grad", "grad_and_value", "vmap", "vjp", "jvp", "jacrev", "jacfwd", "hessian")
] + [("torch", "vmap", "torch.vmap")] + [
    ("torch.autograd.forward_ad", name, f"torch.autograd.forward_ad.{name}")
    for name in ("make_dual", "unpack_dual")
] + [
    ("torch.autograd.functional", name, f"torch.autograd.functional.{name}")
    for name in ("jacobian", "hessian", "vjp", "jvp", "hvp", "vhp")
] + [("torchviz", "make_dot_from_trace", "torchviz.make_dot_from_trace")]
# gradcheck and gradgradcheck are drawn as one representative pass each (gradcheck_events.py)


def _unrecorded_calls(module_name: str) -> list[tuple[Any, str, str]]:
    """(owner, name, call) of UNRECORDED that `module_name`, imported by now, holds."""
    owner = sys.modules.get(module_name)
    return [(owner, name, call) for module, name, call in UNRECORDED
            if module == module_name and callable(getattr(owner, name, None))]


def _noting(recorder: Recorder, owner: Any, name: str, call: str):
    original = getattr(owner, name)

    @functools.wraps(original)
    def noted(*args, **kwargs):
        if torch.compiler.is_compiling():  # dynamo traces the transform itself
            return original(*args, **kwargs)
        if not recorder.busy and not _called_by_torch():
            try:
                recorder.saw_unrecorded(call)
            except Exception as exc:  # noqa: BLE001 - never break the script for our notes
                recorder._internal_error("noting a call", exc)
        return original(*args, **kwargs)

    return noted


def _argument(function: Any, args: tuple, kwargs: dict, name: str) -> Any:
    """The value `name` has in this call of `function` (its default if not given); None when
    the call does not bind (torch will say why when it runs)."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return bound.arguments.get(name)


def _closure(args: tuple, kwargs: dict) -> bool:
    """Was the step given a closure? (A step hook's args begin with the optimizer itself.)"""
    return (len(args) > 1 and args[1] is not None) or kwargs.get("closure") is not None


def _one_pass(x: Any) -> bool:
    """An iterator (a generator such as model.parameters()): it can be read only once."""
    return hasattr(x, "__next__") and not isinstance(x, torch.Tensor)


def _torchviz_calls(recorder: Recorder, torchviz: Any) -> list[tuple[Any, str, Any]]:
    """(owner, name, replacement) for make_dot wherever torchviz keeps it: `from torchviz
    import make_dot` after this point gets the recording one."""
    torchviz_dot = sys.modules.get("torchviz.dot")
    original = getattr(torchviz_dot, "make_dot", None)
    if original is None:
        return []

    @functools.wraps(original)
    def make_dot(var, params=None, *args, **kwargs):
        if not recorder.busy:
            try:
                recorder.views.make_dot(var, params)
            except Exception as exc:  # noqa: BLE001 - never break the script for our views
                recorder._internal_error("recording make_dot", exc)
        with recorder.quiet():  # torchviz's own tensor reads are not the script's
            picture = original(var, params, *args, **kwargs)
        return keep_picture_local(picture, recorder.views.rendered_at)

    return [(owner, "make_dot", make_dot) for owner in (torchviz, torchviz_dot)
            if getattr(owner, "make_dot", None) is original]


@contextlib.contextmanager
def instrumented(recorder: Recorder, func_calls: FuncCalls | None = None):
    """Everything the script does inside this block is recorded."""
    originals: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        originals.append((owner, name, owner.__dict__[name] if isinstance(owner, type)
                          else getattr(owner, name)))
        setattr(owner, name, value)

    tensor_backward = torch.Tensor.backward
    autograd_backward = torch.autograd.backward
    autograd_grad = torch.autograd.grad

    def backward_method(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        # dynamo traces torch's own backward; torch's calls are counted by backward_function
        if torch.compiler.is_compiling() or _called_by_torch():
            return tensor_backward(self, gradient, retain_graph, create_graph, inputs)
        return recorder.around_backward(
            "Tensor.backward", self,
            lambda: tensor_backward(self, gradient, retain_graph, create_graph, inputs),
            create_graph=bool(create_graph), seed=gradient)

    def backward_function(tensors, *args, **kwargs):
        if recorder.watched_until is not None and recorder.backward_depth:
            # Tensor.backward's own call, unwatched: nothing to note (no pass is recorded),
            # and no frames to walk on every step of a long script
            return autograd_backward(tensors, *args, **kwargs)
        if torch.compiler.is_compiling():
            return autograd_backward(tensors, *args, **kwargs)
        if _called_by_torch():
            recorder.saw_nested_backward()
            return autograd_backward(tensors, *args, **kwargs)
        return recorder.around_backward(
            "torch.autograd.backward", tensors,
            lambda: autograd_backward(tensors, *args, **kwargs),
            create_graph=bool(_argument(autograd_backward, (tensors, *args), kwargs,
                                        "create_graph")),
            seed=_argument(autograd_backward, (tensors, *args), kwargs, "grad_tensors"))

    def grad_function(outputs, *args, **kwargs):
        if torch.compiler.is_compiling() or _called_by_torch():
            return autograd_grad(outputs, *args, **kwargs)
        # `inputs` may be a generator (model.parameters()): torch would use it up, and the
        # recorder needs it too to name the gradients; a tuple serves both
        if args and _one_pass(args[0]):
            args = (tuple(args[0]), *args[1:])
        elif _one_pass(kwargs.get("inputs")):
            kwargs["inputs"] = tuple(kwargs["inputs"])
        return recorder.around_backward(
            "torch.autograd.grad", outputs,
            lambda: autograd_grad(outputs, *args, **kwargs), returns_grads=True,
            create_graph=bool(_argument(autograd_grad, (outputs, *args), kwargs,
                                        "create_graph")),
            inputs=_argument(autograd_grad, (outputs, *args), kwargs, "inputs"),
            seed=_argument(autograd_grad, (outputs, *args), kwargs, "grad_outputs"))

    backward_method.__doc__ = tensor_backward.__doc__
    backward_function.__doc__ = autograd_backward.__doc__
    grad_function.__doc__ = autograd_grad.__doc__

    function_cls = torch.autograd.Function
    apply_original = internals.function_apply()

    def apply(cls, *args, **kwargs):
        if torch.compiler.is_compiling():
            return apply_original(cls, *args, **kwargs)
        with recorder.custom_forward():
            out = apply_original(cls, *args, **kwargs)
        try:
            if not recorder.busy:
                recorder.tag_nodes(tensors_of(out))
            recorder.saw_custom_apply(cls, args)
        except Exception as exc:  # noqa: BLE001
            recorder._internal_error("copying a Function's inputs", exc)
        return out

    def patch_module(module_name: str, late: bool = False) -> None:
        """The calls of UNRECORDED (and torchviz's make_dot) that `module_name` holds."""
        for owner, name, call in _unrecorded_calls(module_name):
            if func_calls is not None:  # torch.func transforms: one ordinary call, to draw
                patch(owner, name, func_calls.wrap(getattr(owner, name), call))
            patch(owner, name, _noting(recorder, owner, name, call))
            if late:
                ours(getattr(owner, name))
        if module_name == "torchviz":
            for owner, name, value in _torchviz_calls(recorder, sys.modules["torchviz"]):
                patch(owner, name, value)
                if late:
                    ours(value)

    # a module not imported yet (torchviz: 0.13 s of a run that never draws with it; issue
    # 36) is patched the moment the script imports it, however it does (on_import.py)
    def patch_late(name: str, _module: Any) -> None:
        # on_import drops what its waiting functions raise (the script's import must not
        # fail for us): said here, as a part of the run that was not recorded
        try:
            patch_module(name, late=True)
        except Exception as exc:  # noqa: BLE001
            recorder._internal_error(f"watching {name}, which the script imported", exc)

    awaited: list[Callable[[], None]] = []
    for module_name in dict.fromkeys(module for module, _, _ in UNRECORDED):
        if module_name in sys.modules:
            patch_module(module_name)
        else:
            awaited.append(on_import(module_name, functools.partial(patch_late, module_name)))
    for owner, name, value in checked_calls(recorder, called_by_torch=_called_by_torch,
                                            argument=_argument):
        patch(owner, name, value)

    register_full_backward_hook = torch.nn.Module.register_full_backward_hook

    @functools.wraps(register_full_backward_hook)
    def full_backward_hook(self, hook, *args, **kwargs):
        if not recorder.busy:  # its line labels the share the hook takes (backward_event.py)
            recorder.saw_module_hook()
        return register_full_backward_hook(
            self, recorder.counted_hook(KINDS["register_full_backward_hook"], hook, self),
            *args, **kwargs)

    patch(torch.nn.Module, "register_full_backward_hook", full_backward_hook)
    for call in ("register_full_backward_pre_hook", "register_backward_hook"):
        patch(torch.nn.Module, call, _counting_registrar(recorder, call))
    patch(torch.Tensor, "backward", backward_method)
    patch(torch.autograd, "backward", backward_function)
    patch(torch.autograd, "grad", grad_function)
    patch(function_cls, "apply", classmethod(apply))

    # global hooks: dynamo traces them into the code it compiles (the module hooks inline
    # into every compiled forward), so while it traces they do nothing; a compiled region is
    # then one node of the eager graph (AOTAutograd's CompiledFunctionBackward)
    def step_entered(opt, args, kwargs):
        if not torch.compiler.is_compiling():
            recorder.before_step(opt, closure=_closure(args, kwargs))

    def step_left(opt, args, kwargs):
        if not torch.compiler.is_compiling():
            recorder.after_step(opt)

    def module_entered(module, args):
        if not torch.compiler.is_compiling():
            recorder.module_entered(module)

    def module_left(module, args, out):
        if not torch.compiler.is_compiling():
            recorder.module_left(module)

    handles = [
        optim_module.register_optimizer_step_pre_hook(step_entered),
        optim_module.register_optimizer_step_post_hook(step_left),
        nn_module.register_module_forward_pre_hook(module_entered),
        nn_module.register_module_forward_hook(module_left, always_call=True),
    ]
    ours(_OpMode.__torch_function__, step_entered, step_left, module_entered, module_left,
         *(getattr(owner, name) for owner, name, _ in originals))
    anomaly = torch.autograd.set_detect_anomaly(True, check_nan=False)
    recorder.anomaly_off = lambda: torch.set_anomaly_enabled(False)
    mode = _OpMode(recorder)
    depth = torch._C._len_torch_function_stack()
    mode.__enter__()
    watching = [True]

    def stop_watching() -> bool:
        """Leave the operation mode and drop the module hooks: what they note only explains
        recorded passes (and failures, said as unwatched past here: failures.py). Only while
        ours is the innermost mode (a mode's exit pops whichever is on top: a script's own,
        or `torch.device`'s, would go instead); False when it is not, to be tried again."""
        if not _innermost(mode):
            return False
        mode.__exit__(None, None, None)
        watching[0] = False
        for h in handles[2:]:  # the module hooks; an optimizer step is one call, not per op
            h.remove()
        return True

    def watch_again() -> None:
        """For autograd-lab's own drawing after the script (after_work.py): the graphs it
        makes then (a torch.func forward) get their lines and modules as while watching."""
        if not watching[0]:
            mode.__enter__()
            watching[0] = True
            handles.append(nn_module.register_module_forward_pre_hook(module_entered))
            handles.append(nn_module.register_module_forward_hook(module_left,
                                                                  always_call=True))

    recorder.stop_watching = stop_watching
    recorder.watch_again = watch_again
    try:
        yield recorder
    finally:
        for cancel in awaited:  # an import after the run is not the script's
            cancel()
        with contextlib.suppress(Exception):
            _leave(depth)
        anomaly.__exit__(None, None, None)
        for h in handles:
            h.remove()
        for owner, name, value in reversed(originals):
            setattr(owner, name, value)
