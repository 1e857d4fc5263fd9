"""The most memory torch's allocator held during each recorded pass's forward, and at its end.

A forward starts at the first operation autograd records after the script start or the last
recorded backward (grad mode on, a tensor that requires grad among its arguments: the first
node of the graph); it ends as the backward is called. On CPU the numbers are the profiler's
memory events (`profile_memory=True`): torch's CPU allocator reports every allocation and free
while the profiler is on. The profiler runs from the script start to the last kept pass's
backward, recording nothing else (no operator events: scopes narrowed to our two markers), and
the events are summed in time order once it stops. On CUDA, torch.cuda's own counters: the
peak is reset at each forward start (`reset_peak_memory_stats`, which the script then also
sees); cuBLAS's workspaces are made before the script (`_blas_workspaces_made`). What is
read: the peak above the forward start's total (at least 0, and at least what is held: a
reset by the script itself loses the peak before it), and the total when backward began,
minus that start. A script that starts torch's profiler itself ends ours (one at a time):
passes from then on say so, as do those after the script's first MAX_OPERATIONS operations
while the profiler records (its record, and its cost to stop, grow with each). Memory other
threads allocate is not seen (thread-local reports). The numbers are the process's: garbage
the collector frees during the forward (a kernel's earlier cells, an earlier in-process
trace) lowers the total there, as it does plainly. A kernel's cells are not measured
(tracer.py's `forward_memory`): without start(), no forward is looked for. While on, the
profiler cost a 4-layer transformer's forward and backward about 18% more CPU time, plain
(about 6% of a traced run of 40 steps, its 10 kept passes measured): every kept pass is
measured.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["MAX_OPERATIONS", "ForwardMemory"]

_FORWARD = "autograd_lab.forward_start."
_BACKWARD = "autograd_lab.backward_start."
_MAX_BYTES = 2**53 - 1  # the schema's bound (a JSON number the page reads exactly)
# the script's operations while the profiler records. Its record holds a few allocator reports
# per operation, and stopping it makes each about 2 kB for a moment, counted against the run's
# limits: 100k `y = x + 1`, 600k reports, took 1.2 GB more and 2.7 s of CPU to stop. A 4-layer
# transformer's 10 kept passes (bench/traced_vs_plain.py) ran 10.7k operations, 70k reports.
MAX_OPERATIONS = 50_000


def _blas_workspaces_made(device: str) -> None:
    """cuBLAS keeps a workspace per handle (cuBLASLt another), taken from torch's caching
    allocator at a process's first matrix product and kept for its life: on an H100 a worker's
    first forward held 34.8 MB for a model that saved 172 kB, all but 0.2 MB of it that. Made
    here, before the script, so that a forward's numbers are the forward's own; the script's
    own readings of memory_allocated see them from its start."""
    try:
        with torch._C.DisableTorchFunction():  # our own ops: not the script's
            a = torch.ones(2, 2, device=device)
            torch.nn.functional.linear(a, a, a[0])  # with a bias: cuBLASLt
            torch.mm(a, a)  # cuBLAS
            del a
    except Exception:  # noqa: BLE001 - the script runs anyway; its numbers may then hold them
        pass


class ForwardMemory:
    def __init__(self) -> None:
        self.waiting = False  # for a forward's first recorded operation
        self._active = False  # start() was called, the last stop() not yet
        self.on = False  # the profiler records
        self._operations = 0  # the script's, while it does (`operation`)
        self._candidate = 0  # operations that might have begun a forward, numbered
        self._started: set[int] = set()  # those that did
        self._backward_marks: list[int] = []  # the passes whose backward start was marked
        self._windows: dict[int, tuple[int, int]] = {}  # pass index -> (peak, held), CPU
        self._cuda: dict[int, tuple[int, int]] = {}  # pass index -> (peak, held) above start
        self._cuda_start: tuple[int, int] | None = None  # (device, bytes at the forward start)
        self._line: int | None = None
        self._lines: dict[int, int | None] = {}
        self.unmeasured: str | None = None  # why no profiler ran (or from when)
        self._restore: list[tuple[Any, str, Any]] = []

    # -- the run -----------------------------------------------------------------------------
    def start(self, device: str = "cpu") -> None:
        """At the script start: the CPU allocator's reports on, nothing else recorded. On
        `device` cuda, cuBLAS's workspaces are made first (`_blas_workspaces_made`)."""
        self._active = True
        self.waiting = True
        if device.startswith("cuda"):
            _blas_workspaces_made(device)
        try:
            from torch._C._profiler import ProfilerActivity, RecordScope, _ExperimentalConfig
            from torch.autograd import (
                ProfilerConfig,
                ProfilerState,
                _enable_profiler,
                _prepare_profiler,
            )
            if torch._C._autograd._profiler_enabled():
                self.unmeasured = "a profiler was already running when the script started"
                return
            # Kineto writes a line to stderr at each start and stop unless told not to: the
            # script's stderr is the script's. Read once, when Kineto starts.
            had = os.environ.get("KINETO_LOG_LEVEL")
            os.environ["KINETO_LOG_LEVEL"] = "6"
            try:
                config = ProfilerConfig(ProfilerState.KINETO, False, True, False, False, False,
                                        _ExperimentalConfig())
                activities = {ProfilerActivity.CPU}
                _prepare_profiler(config, activities)  # enabling unprepared crashes (2.13)
                _enable_profiler(config, activities, {RecordScope.USER_SCOPE})
            finally:
                if had is None:
                    os.environ.pop("KINETO_LOG_LEVEL", None)
                else:
                    os.environ["KINETO_LOG_LEVEL"] = had
        except Exception as exc:  # noqa: BLE001 - the script runs anyway; the page says why
            self.unmeasured = f"torch's profiler did not start here ({type(exc).__name__}: " \
                              f"{str(exc)[:200]})"
            return
        self.on = True
        self._watch_script_profilers()

    def _watch_script_profilers(self) -> None:
        """A profiler the script starts replaces ours (torch runs one per thread, and ours would
        come back empty): ours stops first, keeping what it saw."""
        prof = torch.autograd.profiler
        for name in ("_prepare_profiler", "_enable_profiler"):
            original = getattr(prof, name, None)
            if original is None:
                continue

            def replaced(*args, _original=original, **kwargs):
                if self.on:
                    self.stop(reason="the script started torch's profiler itself, which ends "
                                     "autograd-lab's (one runs at a time)")
                return _original(*args, **kwargs)
            self._restore.append((prof, name, original))
            setattr(prof, name, replaced)

    def operation(self) -> None:
        """Each of the script's operations while the profiler records (intercept.py): past
        MAX_OPERATIONS it stops, the passes it measured kept."""
        self._operations += 1
        if self._operations > MAX_OPERATIONS:
            self.stop(reason=f"the script ran more than {MAX_OPERATIONS} torch operations "
                             "before this pass's backward: torch's profiler stopped there, to "
                             "bound its record")

    def forward_op(self, args: tuple) -> bool:
        """Before an operation while waiting, with grad mode on: might it be the forward's
        first recorded one (a tensor that requires grad among its arguments)? If so, a marker
        (and CUDA's counters) now, before it allocates; `made` says after it whether it was."""
        tensors = [a for a in _flat(args) if isinstance(a, torch.Tensor)]
        if not any(t.requires_grad for t in tensors):
            return False
        self._candidate += 1
        if self.on:
            self._mark(_FORWARD + str(self._candidate))
        device = next((t.device for t in tensors if t.device.type == "cuda"), None)
        self._cuda_start = None
        if device is not None:
            index = device.index if device.index is not None else torch.cuda.current_device()
            torch.cuda.reset_peak_memory_stats(index)
            self._cuda_start = (index, torch.cuda.memory_allocated(index))
        return True

    def made(self, out: Any, line) -> None:
        """After a candidate: it made a node (an output with a grad_fn), so the forward began
        at its marker. A size query or an in-place init on a parameter (nn.Linear's own
        constructor) made none: the wait goes on."""
        outs = out if isinstance(out, (list, tuple)) else (out,)
        if not any(isinstance(t, torch.Tensor) and t.grad_fn is not None for t in outs):
            return
        self.waiting = False
        self._line = line()
        self._started.add(self._candidate)

    def backward_began(self, index: int, outputs: list[torch.Tensor]) -> None:
        if self.waiting:  # no recorded operation since the last backward: no forward of its own
            return
        self._lines[index] = self._line
        if self._cuda_start is not None and any(t.device.type == "cuda" for t in outputs):
            device, start = self._cuda_start
            self._cuda[index] = _above(torch.cuda.max_memory_allocated(device),
                                       torch.cuda.memory_allocated(device), start)
        if self.on:
            self._mark(_BACKWARD + str(index))
            self._backward_marks.append(index)

    def backward_ended(self) -> None:
        # only while measuring: a kernel's cells never start it (tracer.py's forward_memory)
        self.waiting = self._active

    def _mark(self, name: str) -> None:
        with torch.autograd.profiler.record_function(name):
            pass

    def stop(self, reason: str | None = None) -> None:
        """Every kept pass has begun its backward (or the script ended): the profiler stops."""
        if reason is None:
            self._active = False
            self.waiting = False  # no forward to look for any more: one check less per op
        for owner, name, value in reversed(self._restore):
            setattr(owner, name, value)
        self._restore.clear()
        if not self.on:
            return
        self.on = False
        try:
            # summed now, and let go: the events are not kept through the rest of the run
            self._windows = self._cpu_windows(torch.autograd._disable_profiler().events())
        except Exception as exc:  # noqa: BLE001
            self.unmeasured = f"torch's profiler did not stop cleanly ({type(exc).__name__})"
            return
        if reason is not None:
            self.unmeasured = reason

    # -- the numbers -------------------------------------------------------------------------
    def measured(self) -> dict[int, dict]:
        """pass index -> its "forward_memory" entry (the Trace's)."""
        out: dict[int, dict] = {}
        for index, (peak, held) in self._cuda.items():
            out[index] = {"device": "cuda", "peak_bytes": _bounded(peak),
                          "held_bytes": _bounded(held), "line": self._lines.get(index)}
        for index, (peak, held) in self._windows.items():
            out.setdefault(index, {"device": "cpu", "peak_bytes": _bounded(peak),
                                   "held_bytes": _bounded(held),
                                   "line": self._lines.get(index)})
        return out

    def attach(self, events: list[dict]) -> None:
        measured = self.measured()
        for event in events:
            if event.get("kind") != "backward" or event.get("synthetic"):
                continue
            entry = measured.get(event["index"])
            if entry is not None:
                event["forward_memory"] = entry
            elif event["index"] in self._lines and self.unmeasured:
                event["forward_memory"] = {"unmeasured": self.unmeasured[:300]}

    def _cpu_windows(self, events: list) -> dict[int, tuple[int, int]]:
        """Sum the CPU allocator's reports in time order; each pass: the most above the sum at
        its forward's start marker, and the sum at its backward's."""
        # (time, 0 forward mark / 1 report / 2 backward mark, position in the record: the
        # order of reports stamped alike, bytes or the pass index)
        timeline: list[tuple[int, int, int, int]] = []
        backwards = {_BACKWARD + str(i): i for i in self._backward_marks}
        forwards = {_FORWARD + str(k) for k in self._started}
        for e in events:
            name = e.name()
            if name == "[memory]":
                if str(e.device_type()) == "DeviceType.CPU":  # CUDA's own are read apart
                    timeline.append((e.start_ns(), 1, len(timeline), e.nbytes()))
            elif name in forwards:
                # allocations stamped at the marker's own time are the operation's: after it
                timeline.append((e.start_ns(), 0, len(timeline), 0))
            elif name in backwards:  # and at a backward's, the forward's
                timeline.append((e.start_ns(), 2, len(timeline), backwards[name]))
        timeline.sort()  # tuples: a C comparison each, no key function called per report
        out: dict[int, tuple[int, int]] = {}
        total = 0
        start: int | None = None
        peak = 0
        for _t, kind, _position, value in timeline:
            if kind == 1:
                total += value
                if start is not None:
                    peak = max(peak, total)
            elif kind == 0:
                start, peak = total, total
            elif start is not None:
                out[value] = (peak - start, total - start)
                start = None
        return out


def _flat(args):
    """The arguments, a list's or tuple's items among them (torch.cat([a, b]), F.linear's
    keyword weight): one level down, as operations take them."""
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from a
        elif isinstance(a, dict):
            yield from a.values()
        else:
            yield a


def _above(most: int, now: int, start: int) -> tuple[int, int]:
    """CUDA's (peak, held) above the forward start's total. The peak is at least 0 (the start
    was itself a total held) and at least what is held now: a script that resets the peak
    mid-forward after freeing (`torch.cuda.reset_peak_memory_stats`) leaves its counter below
    the start, and the peak before that reset is lost."""
    held = now - start
    return max(most - start, held, 0), held


def _bounded(n: int) -> int:
    return max(-_MAX_BYTES, min(_MAX_BYTES, int(n)))

