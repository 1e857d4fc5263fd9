"""Trace one script, in this process: the whole instrumented run, start to document.

Called by the worker (`app.runner.worker`, a child process the runner starts); tests call it
directly too. Nothing here confines the script: that is the runner's business.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from app.format import Trace, diagnostic, error_record, new_document

from .after_work import AfterWork
from .anomaly_stack import stack_from
from .as_main import (
    CappedText,
    TimeLimitExceeded,
    error_from_exception,
    exec_as_main,
    main_module,
    scrub_frames,
)
from .compiled import CompileCalls
from .compiled_graphs import MAX_REGIONS
from .custom_check import check_custom_functions
from .devices import device_problem
from .diagnose import diagnose, flow_findings
from .failures import explain as explain_failure
from .figures import MAX_FIGURES, FigureCapture
from .func_forward import FuncCalls, rng_forked
from .grad_scaler import ScalerWatch
from .heap_frozen import older_objects_frozen
from .intercept import instrumented
from .manual_nodes import HandCalls
from .recorder import Recorder, RecordingLimits
from .summary import RUN_VALUES, summarize_many
from .views import MAX_VIEWS, VIEW_NODE_BUDGET

__all__ = ["trace_script", "run_traced"]

# how anomaly mode's warning says a backward failed (torch/csrc/autograd/python_anomaly_mode.cpp)
_ANOMALY_REPORT = "Traceback of forward call that caused the error"


def trace_script(path: Path, *, name: str | None = None, argv: list[str] | None = None,
                 device: str = "cpu", limits: RecordingLimits | None = None,
                 after_script: Callable[[], None] | None = None,
                 keep: list | None = None, deadline: float | None = None,
                 load_matplotlib: bool = True) -> Trace:
    """Run the script at `path` under the recorder and return its Trace document.
    `after_script()` is called the moment the script ends, however it ends (the worker frees
    the memory it kept back for the report). `keep` gets the script's module, which then
    outlives this call: a worker that exits after its report never frees the script's graph,
    whose nodes, once Python has wrapped them (the recorder does), torch frees recursively: a
    million-node chain overflowed the stack in that teardown and lost the report.
    `deadline` (time.monotonic()) is when the run's time limit falls: autograd-lab's own work
    after the script is bounded by it (after_work.py). `load_matplotlib`: off where the
    script never imports it (the runner's preload.py): its figures are watched from the
    moment it is imported, if it is (FigureCapture)."""
    path = Path(path).resolve()
    source = path.read_text(encoding="utf-8", errors="replace")
    doc = new_document(name or path.name, source, device, torch.__version__)
    doc["script"]["args"] = list(argv or [])

    def start() -> tuple[dict, Callable[[], object]]:
        module = main_module(path)
        if keep is not None:
            keep.append(module)
        return module.__dict__, lambda: exec_as_main(path, source, list(argv or []), module)

    return run_traced(doc, source, str(path), start, device=device, limits=limits,
                      after_script=after_script, deadline=deadline,
                      load_matplotlib=load_matplotlib)


def run_traced(doc: Trace, source: str, script_path: str,
               start: Callable[[], tuple[dict, Callable[[], object]]], *, device: str = "cpu",
               limits: RecordingLimits | None = None, chosen_root: bool = True,
               after_script: Callable[[], None] | None = None,
               deadline: float | None = None, anomaly_reports: list[str] | None = None,
               cell_files: dict[str, int] | None = None,
               load_matplotlib: bool = True, show_figures: bool = False,
               echo: bool = False, forward_memory: bool = True) -> Trace:
    """The instrumented run behind `trace_script` and `in_namespace.py`: `start()` (called once
    the interpreter's state is saved) gives the namespace the code runs in and the call that
    runs it, whose frames' file is `script_path`. With `chosen_root` off, code that calls no
    backward gets none from autograd-lab (its tensors are not ours to add gradients to).
    `anomaly_reports` gets each forward traceback anomaly mode wrote when a backward failed,
    as it stands in the Trace's stderr: a kernel keeps them in the Trace and leaves them out
    of the stderr it echoes (55 lines of its own frames above the explanation).
    `load_matplotlib`, `show_figures`: see FigureCapture (a kernel: off, on). `echo`: what
    the code prints also goes to this process's stdout and stderr as it is printed (a
    kernel's, so that a cell's prints arrive while it runs), anomaly mode's reports
    excepted. `forward_memory`: measure each kept forward's peak (forward_memory.py); off in a
    kernel, whose earlier cells' tensors the profiler never saw allocated: their frees would
    go uncounted, and torch's CPU allocator warns of each into the notebook."""
    with older_objects_frozen():  # the garbage collector's work is the run's own
        return _run_traced(doc, source, script_path, start, device=device, limits=limits,
                           chosen_root=chosen_root, after_script=after_script,
                           deadline=deadline, anomaly_reports=anomaly_reports,
                           cell_files=cell_files, load_matplotlib=load_matplotlib,
                           show_figures=show_figures, echo=echo, forward_memory=forward_memory)


def _run_traced(doc: Trace, source: str, script_path: str,
                start: Callable[[], tuple[dict, Callable[[], object]]], *, device: str,
                limits: RecordingLimits | None, chosen_root: bool,
                after_script: Callable[[], None] | None, deadline: float | None,
                anomaly_reports: list[str] | None, cell_files: dict[str, int] | None,
                load_matplotlib: bool, show_figures: bool, echo: bool,
                forward_memory: bool) -> Trace:
    problem = device_problem(device)
    if problem:
        doc["error"] = error_record("DeviceUnavailable", problem)
        return doc

    recorder = Recorder(script_path, limits or RecordingLimits(), cell_files=dict(cell_files or {}))
    out, err = (CappedText(echo=sys.stdout), CappedText(echo=sys.stderr)) if echo else \
        (CappedText(), CappedText())
    error = None
    saved = sys.stdout, sys.stderr, list(sys.argv), list(sys.path), sys.modules.get("__main__")
    recursion_limit = sys.getrecursionlimit()  # a script may raise it; the caller keeps its own
    namespace, run = start()
    interrupted: KeyboardInterrupt | None = None
    after_notes: list = []
    with contextlib.ExitStack() as stack:
        if device != "cpu":
            torch.set_default_device(device)
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
        warnings.showwarning = functools.partial(_show_warning, reports=anomaly_reports)
        func_calls = FuncCalls(recorder)
        # anomaly mode's per-node stacks stop at this frame: what called the tracer (a
        # kernel's 25 frames of its own) is never the script's, and cost most of a kernel's run
        stack.enter_context(stack_from(sys._getframe()))
        stack.enter_context(instrumented(recorder, func_calls))
        compile_calls = stack.enter_context(CompileCalls(recorder.current_line).patched())
        scalers = stack.enter_context(ScalerWatch(recorder).patched())
        figures = stack.enter_context(FigureCapture(recorder.current_line,
                                                          load=load_matplotlib,
                                                          show=show_figures))
        sys.stdout, sys.stderr = out, err
        try:
            try:
                if forward_memory:
                    recorder.forward_memory.start(device)
                run()
            finally:  # first, before the error is even written down (it takes memory too)
                recorder.forward_memory.stop()
                if after_script is not None:
                    after_script()
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = error_from_exception(exc, script_path)
                error.update(type="ScriptExit",
                             message=f"the script called sys.exit({exc.code!r})")
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a clear error record
            error = error_from_exception(exc, script_path)
            # in a kernel (no chosen root), an interrupt is the person's: the cell stops there,
            # and so do the cells queued after it, as without autograd-lab
            interrupted = exc if isinstance(exc, KeyboardInterrupt) and not chosen_root else None
        finally:
            sys.stdout, sys.stderr = saved[0], saved[1]
            sys.argv[:], sys.path[:] = saved[2], saved[3]
            if saved[4] is not None:
                sys.modules["__main__"] = saved[4]
            sys.setrecursionlimit(recursion_limit)
        if interrupted is not None:
            raise interrupted  # the stack's exits undo every patch on the way out
        with recorder.guard():
            figures.finish()  # what is still open at the end
        custom_results: dict = {}
        # a script that never compiled has no calls to find (and a source too deep for
        # compile() is too deep for ast.parse)
        hand = HandCalls() if _never_started(error) else HandCalls.in_source(source)
        if recorder.watched_until is not None and recorder.watch_again is not None:
            # the views the script drew unwatched are said; ours after it are watched
            recorder.watched_until["unwatched_views"] = \
                len(recorder.views.records) - recorder.watched_until["views"]
            recorder.watch_again()
        if not (error and error["type"] == "Timeout"):
            with AfterWork(deadline) as work:
                error, custom_results = _after_work(work, recorder, namespace, hand,
                                                    func_calls, error, chosen_root)
            if (cut := work.diagnostic()) is not None:
                after_notes.append(cut)
        if device != "cpu":
            torch.set_default_device(None)

    try:
        recorder.forward_memory.attach(recorder.events)
    except Exception as exc:  # noqa: BLE001 - the Trace is kept without the numbers
        recorder._internal_error("summing the forward's memory", exc)
    doc["events"] = recorder.events
    doc["events_skipped"] = dict(recorder.skipped)
    named = recorder.namer.named()
    doc["params"] = _params(recorder, named)
    results_by_name = {cls.__qualname__: r for cls, r in custom_results.items()}
    _attach_gradcheck(recorder.events, results_by_name)
    # a kernel's namespace holds earlier cells' models: chosen_root is off there, and only
    # there (in_namespace.py)
    doc["diagnostics"] = diagnose(recorder, recorder.events, named, results_by_name,
                                  shared_namespace=not chosen_root)
    doc["diagnostics"].extend(flow_findings(doc))
    doc["diagnostics"].extend(hand.notes(backward_ran=recorder.backward_count() > 0))
    doc["diagnostics"].extend(after_notes)
    doc["diagnostics"].extend(compile_calls.notes())
    doc["diagnostics"].extend(scalers.notes())
    if regions := compile_calls.regions.records():
        doc["compiled_regions"] = regions
    if compile_calls.regions.dropped:
        doc["diagnostics"].append(diagnostic(
            "compiled_regions_dropped", "info", f"{compile_calls.regions.dropped} more compiled "
            f"region(s) were not kept: a run keeps the graphs of {MAX_REGIONS}."))
    if recorder.views.records:
        doc["views"] = recorder.views.finish(recorder.events)
    if recorder.views.dropped:
        doc["diagnostics"].append(diagnostic(
            "views_dropped", "info", f"{recorder.views.dropped} more graph(s) the script asked "
            f"for (make_dot, create_graph=True) were not kept: a run keeps {MAX_VIEWS}, with "
            f"{VIEW_NODE_BUDGET:,} nodes among them."))
    if figures.records:
        doc["figures"] = figures.records
    if recorder.values.dropped:
        doc["diagnostics"].append(diagnostic(
            "values_dropped", "info", f"{recorder.values.dropped:,} tensor summaries keep their "
            f"statistics (min, max, mean, norm) but not their values: a run keeps {RUN_VALUES:,} "
            "numbers in all, so that the report of a big model stays small enough to load."))
    if figures.dropped:
        doc["diagnostics"].append(diagnostic(
            "figures_dropped", "info", f"{figures.dropped} figure(s) were not kept: a run keeps "
            f"at most {MAX_FIGURES}, each at most 1.5 MB as a PNG and 8 MB in all."))
    doc["stdout"], doc["stderr"] = out.getvalue(), err.getvalue()
    doc["error"] = error
    try:
        explain_failure(doc, source, recorder)
    except (Exception, TimeLimitExceeded) as exc:  # noqa: BLE001 - the report matters more
        doc["diagnostics"].append(diagnostic(
            "tracer_error", "warning", f"autograd-lab could not explain this run's failure "
            f"({type(exc).__name__}: {exc}); the script itself ran normally."))
    return doc


def _show_warning(message, category, filename, lineno, file=None, line=None, *,
                  reports: list[str] | None = None):
    text = scrub_frames(warnings.formatwarning(message, category, filename, lineno, line))
    stream = file or sys.stderr
    if reports is not None and _ANOMALY_REPORT in str(message):
        reports.append(text)
        if isinstance(stream, CappedText):  # kept in the Trace, never echoed
            stream.keep(text)
            return
    stream.write(text)


def _never_started(error: dict | None) -> bool:
    """Did the script fail before its first line ran (compile() refused it)? Its error then
    has no frame of the script's: any failure while running has at least its module's."""
    return error is not None and error["type"] not in ("Timeout", "ScriptExit") \
        and not error.get("frames")


def _after_work(work: AfterWork, recorder: Recorder, namespace: dict, hand: HandCalls,
                func_calls: FuncCalls, error: dict | None, chosen_root: bool
                ) -> tuple[dict | None, dict]:
    """autograd-lab's own work after the script, each stage under `work`'s bound: a stage cut
    short leaves out what it draws, never the script's result (error None stays None) nor its
    passes. Only stages with something to do are run, so that a cut names only what is
    really missing. Returns the run's error and the gradcheck results."""
    custom_results: dict = {}
    try:
        if error is None and recorder.backward_count() == 0 and hand:
            work.run("hand", lambda: hand.show(recorder, namespace))  # no pass of ours
        elif error is None and recorder.backward_count() == 0 and chosen_root \
                and (not _computed_unrecorded(recorder) or _root_asked_for(recorder, namespace)):
            before = len(recorder.events)
            ran = work.run("root", lambda: (_backward_from_chosen_root(recorder, namespace),))
            if ran is None:  # cut: a pass cut half-way is ours, not one the script made fail
                del recorder.events[before:]
            else:
                error = ran[0]
        # a script whose autograd work went through calls noted under What to notice
        # (torch.func, gradcheck) did what it meant to: no backward of ours is added
        # (PyTorch's ensembling tutorial, forward-only vmap, got one nobody asked for)
        # the copies these stages call the script's code on, and all it makes then, are
        # ours: named only inside (scratch), never in the script's params or findings
        if error is None and func_calls.calls:
            with recorder.namer.scratch(namespace):
                work.run("func", lambda: func_calls.draw(namespace))
        if recorder.custom_inputs():
            # gradcheck's random inputs are not the script's draws
            with rng_forked(), recorder.namer.scratch(namespace):
                custom_results = work.run("gradcheck",
                                          lambda: check_custom_functions(recorder)) or {}
    except Exception as exc:  # noqa: BLE001 - the script's report matters more
        recorder._internal_error("drawing after the script had finished", exc)
    return error, custom_results


def _computed_unrecorded(recorder: Recorder) -> bool:
    """Did the script compute gradients through calls this tracer notes but does not draw?
    (make_dot_from_trace draws; it computes no gradient.)"""
    return any(c != "torchviz.make_dot_from_trace"
               for calls in recorder.unrecorded.values() for c in calls)


def _root_asked_for(recorder: Recorder, namespace: dict) -> bool:
    """Did the script name its root itself (OUTPUT, or a tensor it gave make_dot)? Then it
    asked for that backward, whatever else it computed."""
    candidate = namespace.get("OUTPUT")
    return (isinstance(candidate, torch.Tensor) and candidate.grad_fn is not None) or \
        recorder.views.last_root is not None


def _backward_from_chosen_root(recorder: Recorder, namespace: dict) -> dict | None:
    """The script never called backward: pick its output and run backward from it ourselves."""
    recorder.namer.finished_globals = namespace
    root, how = None, None
    candidate = namespace.get("OUTPUT")
    drawn = recorder.views.last_root
    if isinstance(candidate, torch.Tensor) and candidate.grad_fn is not None:
        root, how, label = candidate, "the tensor named OUTPUT", "OUTPUT"
    elif drawn is not None:
        root, label, line = drawn
        how = f"the tensor given to make_dot at line {line}" if line else \
            "the tensor given to make_dot"
    else:
        for var, value in reversed(list(namespace.items())):
            if isinstance(value, torch.Tensor) and value.grad_fn is not None \
                    and not var.startswith("_"):
                root, label = value, var
                how = f"the last module-level tensor with a grad_fn (`{var}`)"
                break
    if root is None:
        has_tensor = any(isinstance(v, torch.Tensor) for v in namespace.values())
        detail = ("it made tensors, but none of them has a grad_fn: nothing it computed "
                  "required grad" if has_tensor else "it made no tensor at all")
        return error_record(
            "NoGraph",
            f"There is no autograd graph to show: the script never called backward() and {detail}. "
            "Compute something from a tensor that requires grad (an nn.Module's parameters, or "
            "torch.randn(..., requires_grad=True)) and call .backward() on the result, or name "
            "the tensor to show OUTPUT.")
    gradient = torch.ones_like(root)
    before = len(recorder.events)
    try:
        recorder.around_backward(
            "torch.autograd.backward", root,
            lambda: torch.autograd.backward(root, gradient, retain_graph=True), synthetic=True)
    except Exception as exc:  # noqa: BLE001 - e.g. an in-place change the graph cannot undo
        error = error_from_exception(exc, recorder.script_path)
        error["message"] = (f"autograd-lab took {how} as the root, but backward from it "
                            f"fails: {error['message']}")
        if len(recorder.events) > before:
            _mark_synthetic(recorder.events[-1], how, root, label)
        return error
    if len(recorder.events) == before:  # the walk itself failed: reported as a tracer_error
        return None
    _mark_synthetic(recorder.events[-1], how, root, label)
    return None


def _mark_synthetic(event: dict, how: str, root: torch.Tensor, label: str) -> None:
    event["synthetic_reason"] = (
        f"The script never calls backward(), so autograd-lab took {how} as the root and ran "
        "backward from it with a gradient of ones" + ("." if root.dim() == 0 else
                                                        f" of shape {list(root.shape)}."))
    event["graph"]["nodes"][0]["label"] = label


def _params(recorder: Recorder, named: dict) -> dict:
    params = {}
    with recorder.guard(), torch._C.DisableTorchFunction():  # .grad read past the mode
        grads = summarize_many([t.grad for t, _kind in named.values()], budget=recorder.values)
    for (name, (t, kind)), grad in zip(named.items(), grads, strict=True):
        uses = {str(e["index"]): e["uses"].get(name, 0)
                for e in recorder.events if e["kind"] == "backward"}
        params[name] = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                        "device": str(t.device), "requires_grad": bool(t.requires_grad),
                        "kind": kind, "module": recorder.namer.module_of(name), "uses": uses,
                        "grad": grad}
    return _reached_first(params)


def _reached_first(params: dict) -> dict:
    """The parameters the backward passes reached first, as the script named them; after them,
    those that require grad and got none (a module never called: the template a container
    copies, a layer defined and left unused), grouped by module. On a 48-layer encoder the
    template's 12 parameters headed a table of 588."""
    def unreached(p: dict) -> bool:
        return p["requires_grad"] and p["grad"] is None and not any(p["uses"].values())

    position = {n: i for i, n in enumerate(params)}
    reached = {n: p for n, p in params.items() if not unreached(p)}
    rest = sorted((n for n in params if n not in reached),
                  key=lambda n: (params[n]["module"] or "", position[n]))
    return {**reached, **{n: params[n] for n in rest}}


def _attach_gradcheck(events: list[dict], results: dict[str, dict]) -> None:
    for e in events:
        if e["kind"] != "backward":
            continue
        for node in e["graph"]["nodes"]:
            if node.get("function") in results:
                node["gradcheck"] = results[node["function"]]
