"""The recorder: what the instrumented script did, event by event.

`intercept.py` routes the script's backward calls, optimizer steps, module calls and torch
operations here. Everything the recorder does with tensors itself runs inside `guard()`, so
none of it is mistaken for the script's own work.
"""

from __future__ import annotations

import contextlib
import math
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import _internals as internals
from .backward_event import BackwardRecording, tensors_of
from .cuts import CutLog, Escape
from .forward_memory import ForwardMemory
from .graph import MODULE_TAG, storage_key
from .hooks import counting
from .naming import Namer, script_frames
from .optimizer_rules import group_settings, state_read, take_copies
from .summary import ValueBudget, summarize, summarize_many
from .views import ViewLog

__all__ = ["HookRegistration", "Recorder", "RecordingLimits"]


@dataclass
class RecordingLimits:
    max_backward_events: int = 10
    max_step_events: int = 10
    max_nodes: int = 200_000
    gradcheck_max_numel: int = 512
    # keep watching every operation after the kept passes (slower): by default the tracer
    # stops there, and a failure after says it was not watched (failures.py)
    watch_whole_run: bool = False


@dataclass
class InPlace:
    """A tensor of the graph changed in place: the line, the call, and the node whose output
    it was (what a saved-tensor check names: "output 0 of Sigmoid")."""
    line: int
    call: str
    output_of: str | None


MAX_HOOKS = 200  # hooks the script registers whose calls are counted; past that, left as they are
MAX_NOTES = 200  # in-place changes and `.grad` reads kept, for explaining a failure
MAX_GROUPS = 64  # an optimizer's parameter groups whose settings a step keeps
MAX_USED = 10_000  # leaves whose first use with grad on is remembered
# operations that hand out a tensor's values with no graph (failures.py names each): into a
# Python number or list, into a new tensor of its values, into indices or truth values, and
# casts, which only count when they give an integer or bool tensor (`.float()` keeps the graph)
NUMBER_ESCAPES = frozenset({"item", "__float__", "__int__", "__index__", "__bool__", "tolist",
                            "numpy", "__array__"})
VALUE_ESCAPES = frozenset({"tensor", "as_tensor", "argmax", "argmin", "argsort", "argwhere",
                           "nonzero", "eq", "ne", "gt", "ge", "lt", "le", "__eq__", "__ne__",
                           "__gt__", "__ge__", "__lt__", "__le__", "isclose", "logical_and",
                           "logical_or", "logical_not", "topk_indices"})
CASTS = frozenset({"long", "int", "short", "byte", "char", "bool", "to", "type"})
ESCAPE_NAMES = NUMBER_ESCAPES | VALUE_ESCAPES | CASTS  # one look-up per operation
VALUE_ESCAPE_NAMES = {"__float__": "float()", "__int__": "int()", "__index__": "int()",
                      "__bool__": "bool()", "__array__": "numpy()", "__eq__": "==",
                      "__ne__": "!=", "__gt__": ">", "__ge__": ">=", "__lt__": "<", "__le__": "<=",
                      "eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<=",
                      "tensor": "torch.tensor", "as_tensor": "torch.as_tensor"}
# hooks a script registers on a leaf, which change its gradient between its uses and .grad
LEAF_HOOKS = {"register_hook": "hook", "register_post_accumulate_grad_hook":
              "post-accumulate-grad hook"}
# nodes made with anomaly mode on: every scenario (the largest makes 22) and small script, whose
# failed backward then also prints the forward stack that made the bad node. Past that it is
# switched off: its stack capture (about 1 ms a node) made tracing a 12-layer transformer take
# 0.35 s instead of 0.19, and the recorder's own tags give every node its line anyway
ANOMALY_NODES = 64
# the tracer's files and torch's, which stand between the script and a hook registration
_OUR_FILES = __file__.rsplit("/", 1)[0] + "/"
_DISPATCH_FILES = frozenset({torch._tensor.__file__, torch.overrides.__file__})
# where nn.Module._apply lives: its no_grad copies are not the script reading under no_grad
_MODULE_FILE = nn.modules.module.__file__


@dataclass(eq=False)
class HookRegistration:
    """One hook the script registered, whose calls each recorded pass counts: its kind, the
    line that registered it, and what it sits on (weakly: a hook never keeps its tensor or
    module alive); `on` is the script's variable for it, named when it was registered."""
    kind: str
    line: int | None
    on: str | None
    tensor: weakref.ref | None = None
    module: weakref.ref | None = None


@dataclass
class Recorder:
    script_path: str
    limits: RecordingLimits = field(default_factory=RecordingLimits)
    # a notebook's other cells, by the file name IPython compiled each under -> its execution
    # count: an op written in one of them (a model's forward defined in an earlier cell) is
    # tagged with that cell's line too (CELL_TAG), not only with the traced cell's calling line
    cell_files: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.namer = Namer(self.script_path)
        self.events: list[dict] = []
        self.skipped = {"backward": 0, "step": 0}
        self.internal_errors: list[str] = []
        self._busy = 0
        # id(module) -> (weakref, its path in the last forward that reached it as a child)
        self._forward_paths: dict[int, tuple[weakref.ref, str]] = {}
        self._backward_depth = 0
        self._in_step = 0
        self._custom_forward_depth = 0
        # (module, its path, the prefix of its children's paths)
        self._module_stack: list[tuple[nn.Module, str, str]] = []
        self._submodule_names: dict[int, tuple[Any, dict[int, str]]] = {}
        self.cut_log = CutLog()
        self.inplace: list[InPlace] = []
        self.last_step: dict | None = None  # the latest step event (grad_scaler.py reads it)
        self.steps_taken = 0
        # (line, variable) of each read of a non-leaf's .grad: the variable the script holds
        # it in, found by identity (a line may read a leaf's .grad beside it: `w.grad, y.grad`)
        self.nonleaf_grad_reads: list[tuple[int, str | None]] = []
        self._recording: BackwardRecording | None = None  # the pass being recorded now
        self.passes_kept = False  # every backward pass this run records has been recorded
        # leaf id -> (a weak reference, the line of its first use with grad on)
        self.used_with_grad: dict[int, tuple[weakref.ref, int]] = {}
        # leaves the script hooked: id -> (leaf, [(kind, line)]): each pass draws what their
        # hooks changed as a share of .grad of its own (backward_event.py)
        self.leaf_hooks: dict[int, tuple[torch.Tensor, list[tuple[str, int | None]]]] = {}
        # each optimizer step's (line, optimizer, {parameter: (version before, after)}, how
        # many in-place ops were noted before it: what ran first, whatever the lines say)
        self.step_versions: list[tuple[int | None, str, dict[str, tuple[int, int]], int]] = []
        # what the script computed that the tracer does not draw: line -> the calls made there
        self.unrecorded: dict[int | None, list[str]] = {}
        self._custom_inputs: dict[type, tuple] = {}
        self._pending_steps: dict[int, dict] = {}
        # checks not drawn as passes: line -> {function: passed every time} (gradcheck_events)
        self.check_verdicts: dict[int | None, dict[str, bool]] = {}
        # lines whose torch.func function is not drawn as a view, and why (func_forward.py)
        self.func_passed_over: dict[int | None, str] = {}
        # lines where the script registered modules' full backward hooks (their shares' label)
        self.module_hook_lines: list[int] = []
        # hooks the script registered (counted.py wraps each): their calls are counted by pass
        self.hook_registrations: list[HookRegistration] = []
        # id(module) -> its path, kept for modules the script hooked (a hook's `on`)
        self.hooked_module_paths: dict[int, str] = {}
        # steps made while a recorded backward pass runs, appended after it (around_backward)
        self._held_steps: list[dict] | None = None
        self.values = ValueBudget()
        self.views = ViewLog(self.script_path, self.namer, self.guard, self.current_line)
        # custom Functions whose backward returned a gradient with no graph under create_graph
        self.cut_functions: dict[type, list[str]] = {}
        # switches anomaly mode off (a stack trace for every node created, the main cost of
        # tracing): once no further backward pass will be recorded, or past ANOMALY_NODES
        self.anomaly_off: Callable[[], None] | None = None
        self._nodes_made = 0
        # stops watching operations and module calls (intercept.py): True once done
        self.stop_watching: Callable[[], bool] | None = None
        self.watch_again: Callable[[], None] | None = None  # its undoing, for after the script
        # once it has: the passes recorded then, the line of the backward that ended the last
        # of them, and the views drawn by then (those after have no line or module tags; how
        # many, `unwatched_views`, is set as the script ends: tracer.py watches again then)
        self.watched_until: dict | None = None
        # the allocator's peak in each kept pass's forward (started and stopped by tracer.py)
        self.forward_memory = ForwardMemory()

    # -- our own work ----------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self):
        self._busy += 1
        try:
            with torch.no_grad():
                yield
        finally:
            self._busy -= 1

    @contextlib.contextmanager
    def quiet(self):
        """Like guard(), with grad mode left as it is (gradcheck needs it)."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    @property
    def busy(self) -> bool:
        return self._busy > 0

    @property
    def backward_depth(self) -> int:
        """How many backward calls of the script's are running (one pass: 1)."""
        return self._backward_depth

    def _internal_error(self, where: str, exc: BaseException) -> None:
        # bounded: a failure on every operation of a long script is the same few lines
        if len(self.internal_errors) < MAX_NOTES:
            self.internal_errors.append(f"{where}: {type(exc).__name__}: {exc}")

    def current_line(self) -> int | None:
        for frame in script_frames(self.script_path):
            return frame.f_lineno
        return None

    def saw_unrecorded(self, call: str) -> None:
        """The script called `call` (a torch.func transform, forward-mode AD, ...), which
        computes without a backward graph for this tracer to record: noted, with its line."""
        line = self.current_line()
        calls = self.unrecorded.setdefault(line, []) if (
            line in self.unrecorded or len(self.unrecorded) < MAX_NOTES) else None
        if calls is not None and call not in calls:
            calls.append(call)

    def saw_module_hook(self) -> None:
        line = self.current_line()
        if line is not None and line not in self.module_hook_lines and \
                len(self.module_hook_lines) < MAX_NOTES:
            self.module_hook_lines.append(line)

    def counted_hook(self, kind: str, hook: Any, on: Any) -> Any:
        """`hook`, wrapped so that each call during a recorded pass is counted (hooks.py), or
        `hook` itself once no further pass will be recorded, past MAX_HOOKS, or for our own."""
        if self.busy or self.passes_kept or len(self.hook_registrations) >= MAX_HOOKS or \
                not callable(hook) or not self._registered_by_script():
            return hook
        try:
            with self.guard():
                reg = self._registration(kind, on)
        except Exception as exc:  # noqa: BLE001 - the hook is registered as it is
            self._internal_error("noting a hook", exc)
            return hook
        self.hook_registrations.append(reg)
        return counting(hook, reg, lambda: self._recording)

    def _registered_by_script(self) -> bool:
        """Did the script itself call the registration? torch registers hooks of its own from
        inside its functions (`register_multi_grad_hook` puts one on each tensor): those are
        left as they are and not called the script's. Between the call and here stand only
        our frames and the registration's own dispatch (`Tensor.register_hook`'s)."""
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith(_OUR_FILES) or
                                     frame.f_code.co_filename in _DISPATCH_FILES):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename == self.script_path

    def _registration(self, kind: str, on: Any) -> HookRegistration:
        line = self.current_line()
        if isinstance(on, nn.Module):
            self.hooked_module_paths.setdefault(id(on), "")
            prefix = self.namer.module_prefix(on)
            name = prefix.rstrip(".") if prefix else self.namer.variable_name_of(on)
            return HookRegistration(kind, line, name, module=weakref.ref(on))
        return HookRegistration(kind, line, self.namer.variable_name_of(on),
                                tensor=weakref.ref(on))

    def hook_target(self, reg: HookRegistration) -> str | None:
        """What a hook sits on, as the page names it: a module's path as its operations
        carry it, else the script's variable for it when it was registered."""
        module = reg.module() if reg.module is not None else None
        if module is not None and self.hooked_module_paths.get(id(module)):
            return self.hooked_module_paths[id(module)]
        return reg.on

    def backward_count(self) -> int:
        return sum(1 for e in self.events if e["kind"] == "backward")

    # -- backward --------------------------------------------------------------------------
    def around_backward(self, call: str, outputs: Any, run: Callable[[], Any], *,
                        synthetic: bool = False, returns_grads: bool = False,
                        create_graph: bool = False, inputs: Any = None,
                        seed: Any = None) -> Any:
        if self.busy or self._backward_depth:
            return run()
        self._backward_depth += 1  # Tensor.backward calls torch.autograd.backward: one pass
        if self.watched_until is not None:  # past the kept passes, unwatched: counted only
            self.skipped["backward"] += 1   # (backward_count() reads every event)
            try:
                return run()
            finally:
                self._backward_depth -= 1
        try:
            if self.backward_count() >= self.limits.max_backward_events:
                self._stop_watching(at_line=False)  # if the last kept pass could not (a mode
                self.skipped["backward"] += 1      # of the script's was on top of ours)
                return run()
            input_names = self._input_names(inputs) if returns_grads else None
            try:
                with self.quiet():  # before our walk allocates anything
                    self.forward_memory.backward_began(len(self.events), tensors_of(outputs))
            except Exception as exc:  # noqa: BLE001
                self._internal_error("reading the forward's memory", exc)
            try:
                recording = self._start_backward(call, tensors_of(outputs), synthetic,
                                                 create_graph, input_names)
            except Exception as exc:  # noqa: BLE001 - the script must run even if we cannot trace
                self._internal_error("walking the graph", exc)
                self.forward_memory.backward_ended()  # began above: the next forward is awaited
                return run()
            # steps a hook makes during this pass (an optimizer stepped from a post-accumulate
            # hook) are events after it: the pass took its index when it began
            self._held_steps = []
            self._recording = recording
            try:
                result = run()
            except BaseException as exc:
                try:
                    self.events.append(recording.finish(error=exc))
                finally:
                    self._release_steps()
                raise
            finally:
                self._recording = None
                recording.remove_hooks()
                self.forward_memory.backward_ended()
            try:
                event = recording.finish(
                    results=result if returns_grads else None,
                    inputs=[t for t, _name in input_names] if input_names else None)
                if seed is not None:
                    self._note_seed(event, seed)
            except BaseException:
                self._release_steps()  # held steps are the script's: never lost with our event
                raise
            if input_names is not None:
                # autograd.grad returns a gradient per input and leaves .grad alone: what a
                # parameter's uses add up to is its result, found by this list
                event["inputs"] = [name for _t, name in input_names][:10_000]
            self.events.append(event)
            self._release_steps()
            if create_graph:
                try:
                    self._gradient_graph(event, recording, result if returns_grads else None,
                                         input_names)
                except Exception as exc:  # noqa: BLE001
                    self._internal_error("walking a gradient's graph", exc)
            if self.backward_count() >= self.limits.max_backward_events:
                # every pass kept: what only explains a kept pass is no longer noted, so the
                # rest of a training script runs at nearly plain speed
                self.passes_kept = True
                self.forward_memory.stop()  # no later forward is kept: the profiler's cost ends
                if self.anomaly_off:
                    self.anomaly_off()
                    self.anomaly_off = None
                self._stop_watching()
            return result
        finally:
            self._backward_depth -= 1

    def _stop_watching(self, at_line: bool = True) -> None:
        """Every pass is kept: stop watching each operation and module call (intercept.py), so
        that the rest of a training script runs at plain speed, unless the run asked to be
        watched whole (`watch_whole_run`). What that leaves unseen is said (`watched_until`):
        the passes that ended watched, and the line of the last one's backward (`at_line`:
        called as it ends, not before the next)."""
        if self.stop_watching is None or self.limits.watch_whole_run or not self.passes_kept:
            return
        if self.stop_watching():
            self.stop_watching = None
            self._module_stack.clear()  # no module_left will come for a module still running
            self.watched_until = {
                "passes": self.backward_count() + self.skipped["backward"],
                "line": self.current_line() if at_line else None,
                "records": self.limits.max_backward_events,
                "views": len(self.views.records)}

    def _release_steps(self) -> None:
        held, self._held_steps = self._held_steps or [], None
        for step in held:
            step["index"] = len(self.events)
            self.events.append(step)

    def _gradient_graph(self, event: dict, recording, results: Any,
                        input_names: list[tuple[torch.Tensor, str]] | None) -> None:
        """create_graph=True: the gradients carry a graph of their own. Walk it, and name the
        gradients that came back without one (a custom backward may have cut it)."""
        with self.guard():
            self.namer.refresh()
            if results is not None:  # torch.autograd.grad: the gradients it returned
                # one per input, None for an unused one (allow_unused=True)
                grads = list(results) if isinstance(results, (list, tuple)) else [results]
                pairs = [(g, f"d/d {name}") for g, (_x, name) in zip(
                    grads, input_names or (), strict=False) if isinstance(g, torch.Tensor)]
            else:  # backward(): what it left in the leaves' .grad
                pairs = [(t.grad, f"{name}.grad") for _node, (t, name)
                         in recording.walk.leaves.items() if t.grad is not None]
        with_graph = [(g, label) for g, label in pairs if g.grad_fn is not None]
        without = [label for g, label in pairs if g.grad_fn is None]
        event["create_graph"] = True
        for node_id in recording.cut_by:
            cls = recording.walk.customs.get(node_id)
            if cls is not None:
                self.cut_functions.setdefault(cls, []).append(node_id)
        if without:
            event["no_graph"] = without[:200]
        view = self.views.gradients(event["index"], event.get("line"), with_graph)
        if view is not None:
            event["gradient_view"] = view

    def _input_names(self, inputs: Any) -> list[tuple[torch.Tensor, str]] | None:
        """autograd.grad's inputs, each with its name: a leaf's as every leaf is named, a
        computed tensor's by the script's variable (`x = leaf.clone()` is `x`, not a made-up
        leaf that "received no gradient"), else `input N`."""
        try:
            with self.guard():
                self.namer.refresh()
                named = []
                for i, x in enumerate(tensors_of(inputs)[:10_000], 1):
                    if x.grad_fn is None:
                        named.append((x, self.namer.name(x)[0]))
                    else:  # never a leaf's name: a variable rebound from a leaf keeps it
                        name = self.namer.variable_name_of(x) or f"input {i}"
                        taken = set(self.namer.named()) | {n for _t, n in named}
                        named.append((x, name if name not in taken else f"{name} (computed)"))
                return named
        except Exception as exc:  # noqa: BLE001
            self._internal_error("naming autograd.grad's inputs", exc)
            return None

    def _start_backward(self, call: str, outputs: list[torch.Tensor], synthetic: bool,
                        create_graph: bool = False,
                        input_names: list[tuple[torch.Tensor, str]] | None = None):
        # past every __torch_function__ (the mode's, a subclass's): the walk and the pass's
        # set-up read thousands of shapes, storages and .grad, each a trip through the mode
        with self.guard(), torch._C.DisableTorchFunction():
            self.namer.refresh()
            labelled = [(t, self.namer.variable_name_of(t) or "output") for t in outputs]
            storage_names = {}
            for name, (t, _kind) in self.namer.named().items():
                key = storage_key(t)
                if key:
                    storage_names[key] = name
            return BackwardRecording(
                index=len(self.events), call=call, line=self.current_line(), outputs=labelled,
                script_path=self.script_path, namer=self.namer, storage_names=storage_names,
                guard=self.guard, synthetic=synthetic, max_nodes=self.limits.max_nodes,
                escapes_of=self.escapes_of, create_graph=create_graph, budget=self.values,
                hooks_on=self.hooks_on, module_hook_lines=self.module_hook_lines,
                hook_target=self.hook_target,
                nonleaf_inputs=[(t, n) for t, n in input_names or () if t.grad_fn is not None])

    def before_op(self, args: tuple) -> bool:
        """While a forward is awaited (forward_memory.py): might this operation be its first?"""
        if not torch.is_grad_enabled():
            return False
        try:
            with self.quiet():
                return self.forward_memory.forward_op(args)
        except Exception as exc:  # noqa: BLE001 - never break the script for our bookkeeping
            self._internal_error("reading the forward's memory", exc)
            return False

    def after_candidate(self, out: Any) -> None:
        try:
            with self.quiet():
                self.forward_memory.made(out, self.current_line)
        except Exception as exc:  # noqa: BLE001
            self._internal_error("reading the forward's memory", exc)

    # -- optimizer steps -------------------------------------------------------------------
    def before_step(self, optimizer: torch.optim.Optimizer, closure: bool = False) -> None:
        self._in_step += 1
        if self.busy:
            return
        # once a step is skipped, every later one is (the count of kept steps only grows)
        steps = self.limits.max_step_events if self.skipped["step"] else \
            sum(1 for e in self.events if e["kind"] == "step") + len(self._pending_steps)
        if steps >= self.limits.max_step_events:
            self.skipped["step"] += 1
            return
        try:
            with self.guard(), torch._C.DisableTorchFunction():  # as in _start_backward
                self.namer.refresh()
                taken = [(self.namer.name(p)[0], p, index)
                         for index, group in enumerate(optimizer.param_groups)
                         for p in group["params"]]
                # each weight then its .grad, as the budget has always taken them
                summaries = summarize_many([t for _name, p, _index in taken
                                            for t in (p, p.grad)], budget=self.values)
                params = {}
                for i, (name, p, index) in enumerate(taken):
                    params[name] = (p, summaries[2 * i], summaries[2 * i + 1], index,
                                    state_read(optimizer.state.get(p, {})))
                self._pending_steps[id(optimizer)] = {
                    "line": self.current_line(), "params": params,
                    "lr": [g.get("lr") for g in optimizer.param_groups],
                    "settings": [group_settings(g) for g in optimizer.param_groups[:MAX_GROUPS]],
                    # the weights, .grad and state copied, to check the step by its rule
                    "copies": take_copies(optimizer, closure=closure),
                    "versions": {name: p._version for name, (p, *_) in params.items()}}
        except Exception as exc:  # noqa: BLE001
            self._internal_error("recording an optimizer step", exc)

    def after_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._in_step = max(0, self._in_step - 1)
        self.steps_taken += 1  # every step that ran, recorded or past the limit
        pending = self._pending_steps.pop(id(optimizer), None)
        if pending is None:
            return
        try:
            with self.guard(), torch._C.DisableTorchFunction():  # as in _start_backward
                copies = pending["copies"]
                after = summarize_many([p for p, *_ in pending["params"].values()],
                                       budget=self.values)
                params = {name: {"before": before, "after": summary,
                                 "grad": grad, "group": group, "state": state,
                                 "check": copies.check(p) if copies is not None else None}
                          for (name, (p, before, grad, group, state)), summary
                          in zip(pending["params"].items(), after, strict=True)}
            # JSON has no NaN: a learning rate that is one (or a tensor) is said as unknown
            lr = [float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None
                  for x in pending["lr"]]
            if len(self.step_versions) < MAX_NOTES:
                # the step changes its parameters in place: a backward that needed their old
                # values fails, and failures.py names this step as the culprit
                self.step_versions.append((pending["line"], type(optimizer).__name__, {
                    name: (before, pending["params"][name][0]._version)
                    for name, before in pending["versions"].items()}, len(self.inplace)))
            step = {"kind": "step", "index": len(self.events),
                    "optimizer": type(optimizer).__name__, "line": pending["line"], "lr": lr,
                    "settings": pending["settings"], "params": params}
            self.last_step = step
            if self._held_steps is not None:  # inside a recorded pass: after it (its index)
                self._held_steps.append(step)
            else:
                self.events.append(step)
        except Exception as exc:  # noqa: BLE001
            self._internal_error("recording an optimizer step", exc)

    # -- modules ---------------------------------------------------------------------------
    def module_entered(self, module: nn.Module) -> None:
        # a module's forward run while a backward runs: a checkpoint's forward, run again for
        # what it did not keep. Noted per module: the ops themselves run where no
        # TorchFunctionMode sees them (the engine runs the unpack hook without the script's)
        checkpoint = None
        if self._recording is not None and internals.in_backward_pass() and \
                torch.is_grad_enabled():
            checkpoint = internals.recomputing_checkpoint()
        known = self._forward_paths.get(id(module)) if checkpoint is not None and \
            not self._module_stack else None
        if known is not None and known[0]() is module:
            # the region's module, entered outside the model's forward: named as it was then
            self._module_stack.append((module, known[1], known[1] + "."))
        else:
            self._enter_module(module)
        if checkpoint is not None:
            self._recording.note_recomputed(checkpoint, self._module_stack[-1][1],
                                            type(module).__name__)

    def _enter_module(self, module: nn.Module) -> None:
        """Keep the path of the module now running, named as its parameters are named
        (`layers.3.linear1`, or `model.layers.3.linear1` when the script has several models):
        grouping the graph by module puts a parameter with the ops of its module."""
        if not self._module_stack:
            self.namer.saw_top_level_call(module)
            prefix = self.namer.module_prefix(module)
            if prefix is None:  # a model not named yet: once, not on every forward
                try:
                    with self.guard():
                        self.namer.refresh()
                except Exception as exc:  # noqa: BLE001
                    self._internal_error("naming a model", exc)
                prefix = self.namer.module_prefix(module)
            # a compiled model is its model's, by class too (not dynamo's OptimizedModule)
            own = prefix.rstrip(".") if prefix else \
                type(internals.compiled_original(module) or module).__name__
            self._module_stack.append((module, own, prefix or ""))
            if id(module) in self.hooked_module_paths and prefix:
                # a lone model has no path of its own: its variable names it (hook_target)
                self.hooked_module_paths[id(module)] = own
            return
        parent, parent_path, children_prefix = self._module_stack[-1]
        if internals.compiled_original(parent) is module:
            # dynamo's OptimizedModule calling the model it wraps: one module, not a child
            # named `_orig_mod` (a compiled region's node once said "module _orig_mod")
            self._module_stack.append((module, parent_path, children_prefix))
            return
        name = self._child_names(parent).get(id(module))
        if name is None:  # a submodule added or replaced since the table was made
            name = self._child_names(parent, fresh=True).get(id(module))
        path = children_prefix + name if name else type(module).__name__
        self._module_stack.append((module, path, path + "."))
        if name:  # a checkpoint may run this module again, alone, during backward
            self._forward_paths[id(module)] = (weakref.ref(module), path)
        if id(module) in self.hooked_module_paths:
            self.hooked_module_paths[id(module)] = path

    def _child_names(self, parent: nn.Module, fresh: bool = False) -> dict[int, str]:
        """id(submodule) -> its dotted name under `parent`; built once per module, since a
        96-layer model enters a submodule thousands of times a forward."""
        names = self._submodule_names.get(id(parent))
        if fresh or names is None or names[0]() is not parent:
            table = {id(child): name for name, child in parent.named_modules() if name}
            names = (weakref.ref(parent), table)
            self._submodule_names[id(parent)] = names
        return names[1]

    def module_left(self, module: nn.Module) -> None:
        for i in range(len(self._module_stack) - 1, -1, -1):
            if self._module_stack[i][0] is module:
                del self._module_stack[i:]
                return

    def _module_path(self) -> str | None:
        if not self._module_stack:
            return None
        return self._module_stack[-1][1]

    # -- torch operations ------------------------------------------------------------------
    def after_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Tag new nodes with the module that made them; note leaves that leave the graph."""
        if self.busy:
            return
        self.cut_log.resolve_copies()  # a deepcopy that has ended lets go of its memo here
        name = getattr(func, "__name__", "")
        made = tensors_of(out)
        if args and isinstance(args[0], torch.Tensor) and internals.is_inplace_call(name):
            made.append(args[0])  # an in-place change gives its target a new node
        self.tag_nodes(made)
        if not self.passes_kept and made and torch.is_grad_enabled() and \
                any(t.requires_grad for t in made):
            self._note_used_with_grad(args)
        if torch.is_grad_enabled() and internals.is_inplace_call(name):
            self._note_inplace(name, args, out)
        if internals.is_grad_getter(func) and args and isinstance(args[0], torch.Tensor) \
                and not args[0].is_leaf and not args[0].retains_grad:
            line = self.current_line()
            if line is not None and len(self.nonleaf_grad_reads) < MAX_NOTES:
                self.nonleaf_grad_reads.append((line, self.namer.variable_name_of(args[0])))
        if name in LEAF_HOOKS and args and isinstance(args[0], torch.Tensor) and \
                args[0].is_leaf and len(self.leaf_hooks) < MAX_NOTES:
            entry = self.leaf_hooks.get(id(args[0]))
            if entry is None or entry[0] is not args[0]:
                entry = self.leaf_hooks[id(args[0])] = (args[0], [])
            entry[1].append((LEAF_HOOKS[name], self.current_line()))
        if internals.is_data_getter(func):
            if (memo := _deepcopy_memo()) is not None:
                # Parameter.__deepcopy__ reads .data to make a new leaf (nn.TransformerEncoder
                # copies the layer it is given): a copy, not the script taking values out
                self.cut_log.note_copy(_flat(args[:1]), self.current_line, memo)
            else:
                self.cut_log.note_escape(_flat(args[:1]), ".data", self.current_line)
        elif internals.is_detach_call(name):
            self.cut_log.note_escape(_flat(args[:1]), "detach()", self.current_line)
            self._note_cut(args[:1], "detach()")
        elif internals.is_requires_grad_call(name) and not (args[1] if len(args) > 1
                                               else kwargs.get("requires_grad", True)):
            self.cut_log.note_escape(_flat(args[:1]), "requires_grad_(False)", self.current_line,
                                     switched_off=True)
        elif name == "__set__" and internals.is_requires_grad_setter(func) and \
                len(args) > 1 and not args[1]:
            self.cut_log.note_escape(_flat(args[:1]), "requires_grad = False", self.current_line,
                                     switched_off=True)
        elif (not torch.is_grad_enabled() and not self._in_step and not self._custom_forward_depth
              and not internals.is_update_call(name) and not self._moving_a_module()):
            how = "inference_mode" if torch.is_inference_mode_enabled() else "no_grad"
            self.cut_log.note_escape(_flat(args), how, self.current_line)
            self._note_cut(args, how)
        elif name in ESCAPE_NAMES and torch.is_grad_enabled() and (
                name not in CASTS or isinstance(out, torch.Tensor) and not out.is_floating_point()
                and not out.is_complex()):
            self._note_value_escape(name, args, out)

    def saw_nested_backward(self) -> None:
        """Torch ran a backward inside the pass being recorded (a reentrant checkpoint
        recomputes its forward and runs a backward of its own): counted on that pass."""
        if self._recording is not None and internals.in_backward_pass():
            self._recording.nested += 1

    def _note_seed(self, event: dict, seed: Any) -> None:
        """The gradient the pass started from (`backward(gradient=...)`, `grad_tensors`,
        `grad_outputs`), one per root, None where autograd's implicit 1 was used."""
        seeds = seed if isinstance(seed, (list, tuple)) else [seed]
        with self.guard():
            event["seed"] = [summarize(s, budget=self.values) if isinstance(s, torch.Tensor)
                             else None for s in seeds[:100]]

    def _note_used_with_grad(self, args: tuple) -> None:
        """Leaves the script used in a computation that records a graph: a leaf that then gets
        no gradient was used, and simply never reached by a backward (not only read under
        no_grad). Its first such line is kept."""
        for t in args:
            if isinstance(t, (list, tuple)):  # torch.cat([a, b]): one level, as _flat does
                self._note_used_with_grad(tuple(t)[:1000])
                continue
            if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad and \
                    id(t) not in self.used_with_grad and len(self.used_with_grad) < MAX_USED:
                line = self.current_line()
                if line is not None:
                    self.used_with_grad[id(t)] = (weakref.ref(t), line)

    def first_use_with_grad(self, tensor: torch.Tensor) -> int | None:
        entry = self.used_with_grad.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    def _note_value_escape(self, name: str, args: tuple, out: Any) -> None:
        """Values taken out of tensors that had a graph, into something that has none: a
        Python number (`.item()`, `float()`), a new tensor of their values (`torch.tensor`),
        indices or truth values (`argmax`, `>`), an integer cast. A later "does not require
        grad" is then named by this line and operation, not blamed on no_grad."""
        if isinstance(out, torch.Tensor) and out.requires_grad:
            return
        if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in _flat_deep(args)):
            return
        line = self.current_line()
        if line is not None:
            self.cut_log.note_value_escape(VALUE_ESCAPE_NAMES.get(name, name), line)

    def _moving_a_module(self) -> bool:
        """Is torch's Module._apply (`.to(device)`, `.float()`, `.cuda()`) what turned grad
        mode off? It copies parameters under no_grad by design: the script did not read them
        under `torch.no_grad()` (a model moved to a device was blamed for it)."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename != self.script_path:
            if frame.f_code.co_name == "_apply" and frame.f_code.co_filename == _MODULE_FILE:
                return True
            frame = frame.f_back
        return False

    def tag_nodes(self, tensors: list[torch.Tensor]) -> None:
        """Tag the nodes behind `tensors`, just made, with the script line and the module that
        made them. The first ANOMALY_NODES nodes also get anomaly mode's stack; after that it
        is switched off, and the tags alone give each node its line."""
        line = None
        hooked = None
        elsewhere = None
        path = self._module_path()
        for t in tensors:
            fn = t.grad_fn
            if fn is None:
                continue
            meta = internals.node_metadata(fn)
            if internals.LINE_TAG in meta:
                continue
            if line is None:
                line = self.current_line() or 0
                hooked = internals.saving_is_hooked()
                elsewhere = self._other_cell_line() if self.cell_files else None
            meta[internals.LINE_TAG] = line or None
            if elsewhere is not None:
                meta[internals.CELL_TAG] = elsewhere
            if hooked:
                meta[internals.PACKED_TAG] = True
                frame = internals.checkpoint_saving()
                if frame is not None:  # weak: the node must not keep the region's inputs alive
                    meta[internals.CHECKPOINT_TAG] = weakref.ref(frame)
            if path is not None and MODULE_TAG not in meta:
                meta[MODULE_TAG] = path
            self._nodes_made += 1
        if self._nodes_made >= ANOMALY_NODES and self.anomaly_off is not None:
            self.anomaly_off()
            self.anomaly_off = None

    def _other_cell_line(self) -> tuple[int, int] | None:
        """(execution count, line) of the innermost frame in another notebook cell, when it
        runs inside the traced code (a forward defined in an earlier cell); None when the
        traced code's own frame is innermost, or is not on the stack (the cell that holds the
        magic is further out: its frame is no place of an op)."""
        frame = sys._getframe(2)
        found = None
        while frame is not None:
            name = frame.f_code.co_filename
            if name == self.script_path:
                return found
            if found is None and name in self.cell_files:
                found = self.cell_files[name], frame.f_lineno
            frame = frame.f_back
        return None

    def _note_inplace(self, name: str, args: tuple, out: Any) -> None:
        target = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if target is None or not target.requires_grad or len(self.inplace) >= MAX_NOTES:
            return
        line = self.current_line()
        if line is None:
            return
        # the node now behind the tensor takes the one it replaced as its first input
        fn = target.grad_fn
        before = fn.next_functions[0][0] if fn is not None and fn.next_functions else None
        output_of = type(before).__name__ if before is not None else None
        self.inplace.append(InPlace(line, name, output_of))

    def _note_cut(self, args: tuple, how: str) -> None:
        """A computed tensor leaves the graph here; kept only while passes are still being
        recorded (a later cut cannot explain a recorded graph). Past them, a run watched whole
        keeps its line, which can still explain a failure (failures.py)."""
        if self.backward_count() < self.limits.max_backward_events:
            self.cut_log.note_cut(_flat(args), how, self.current_line)
        elif self.limits.watch_whole_run:
            self.cut_log.note_cut(_flat(args), how, self.current_line, keep=False)

    def hooks_on(self, tensor: torch.Tensor) -> list[tuple[str, int | None]]:
        """The hooks the script registered on this leaf: (kind, line) each."""
        entry = self.leaf_hooks.get(id(tensor))
        return list(entry[1]) if entry is not None and entry[0] is tensor else []

    def escapes_of(self, tensor: torch.Tensor) -> list[Escape]:
        return self.cut_log.escapes_of(tensor)

    def cuts_above(self, tensor: torch.Tensor) -> list[Escape]:
        return self.cut_log.cuts_above(tensor)

    # -- custom Functions ------------------------------------------------------------------
    @contextlib.contextmanager
    def custom_forward(self):
        self._custom_forward_depth += 1
        try:
            yield
        finally:
            self._custom_forward_depth -= 1

    def saw_custom_apply(self, cls: type, args: tuple) -> None:
        """Keep a small copy of the first inputs of each Function, for gradcheck later."""
        if self.busy or cls in self._custom_inputs or internals.is_torchs_own(cls):
            return  # torch's own Functions (a module hook's) are not the script's to check
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or sum(t.numel() for t in tensors) > self.limits.gradcheck_max_numel:
            return
        with self.guard():
            copy = tuple(a.detach().clone().requires_grad_(a.requires_grad)
                         if isinstance(a, torch.Tensor) else a for a in args)
        self._custom_inputs[cls] = copy

    def custom_inputs(self) -> dict[type, tuple]:
        return dict(self._custom_inputs)


def _deepcopy_memo(depth: int = 40) -> dict | None:
    """The memo of a `__deepcopy__` (a tensor's or a parameter's) on the stack above this op
    (where the copy will be found), an empty one if it has none, or None: no copy."""
    frame = sys._getframe(2)
    while frame is not None and depth:
        if frame.f_code.co_name == "__deepcopy__":
            memo = frame.f_locals.get("memo")
            return memo if isinstance(memo, dict) else {}
        frame, depth = frame.f_back, depth - 1
    return None


def _flat_deep(args: Any, depth: int = 0):
    """The tensors in `args`, lists within lists too (torch.tensor([[a, b], [c, d]])), to a
    bounded depth and count."""
    count = 0
    for a in args:
        if isinstance(a, (list, tuple)) and depth < 3:
            for t in _flat_deep(a[:1000], depth + 1):
                count += 1
                yield t
        elif isinstance(a, torch.Tensor):
            yield a
        count += 1
        if count > 10_000:
            return


def _flat(args: Any):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        else:
            yield a
