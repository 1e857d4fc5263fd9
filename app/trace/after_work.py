"""autograd-lab's own work after the script has ended, under a time bound of its own.

After the script, the tracer may draw hand-called nodes, run a backward from a root it chose,
draw the functions torch.func transforms differentiate and gradcheck custom Functions. None of
that is the script's: when it runs out of time, what it was doing is left out and said so (an
`after_work_cut` diagnostic), while the script's own result and recorded passes stand. A run is
a Timeout only when the script itself ran past its limit.

The bound: whichever is smaller of AFTER_WORK_MAX_S and the time left before the run's limit
less REPORT_RESERVE_S. A fixed cap rather than a share of the limit: the extra pictures are
worth a few seconds whatever the limit, and a person waits for the page. 10 s holds the
largest chosen-root pass measured (a 96-layer TransformerEncoder that never calls backward:
9.1 s in-process, 48 layers 6.8 s, on the 2-core test machine while loaded); the scenarios'
whole after-work takes well under a second. The reserve keeps the limit's last seconds for the
report: after 10 recorded passes of the 96-layer encoder, making it (diagnose, explain: 1.7 s),
encoding (0.4 s, 35 MB) and writing it (0.1 s) took 2.1 s on that machine, so 2 s, with the
supervisor's grace after its SIGTERM (GRACE, 3 s, during which the worker lets the report
finish: worker.py) as the margin.

Enforced with SIGALRM (`signal.setitimer`) where this runs on the main thread, which raises
`AfterWorkCut`, an exception of its own that is not the script's time limit; elsewhere (a
thread) only between stages. Without a deadline (a test, a Jupyter kernel) nothing is bounded.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from app.format import Diagnostic, diagnostic

from .as_main import TimeLimitExceeded

__all__ = ["AfterWork", "AfterWorkCut", "AFTER_WORK_MAX_S", "REPORT_RESERVE_S", "TIME_LIMIT",
           "interrupt"]

AFTER_WORK_MAX_S = 10.0
REPORT_RESERVE_S = 2.0
TIME_LIMIT = "the run's time limit came while it worked"

# what the page lacks when a stage is cut or never ran
MISSING = {
    "hand": "the graph of the nodes the script calls by hand",
    "root": "the backward pass autograd-lab runs from the tensor it chose as the root (so "
            "there is no pass to show)",
    "func": "the forward graphs of the functions its torch.func transforms differentiate "
            "(those drawn before the cut are kept)",
    "gradcheck": "the gradcheck verdicts of its custom autograd Functions",
}
DOING = {
    "hand": "drawing the graph of the nodes it calls by hand",
    "root": "running backward from the tensor it chose as the root",
    "func": "drawing the functions its torch.func transforms differentiate",
    "gradcheck": "checking its custom autograd Functions with gradcheck",
}


class AfterWorkCut(BaseException):
    """autograd-lab's work after the script ran out of its own time (or the run's limit came
    while it worked). A BaseException, like the script's own time limit, so that no
    `except Exception` of the script's functions (which the drawing calls again) keeps it."""


_current: AfterWork | None = None  # the after-work running now, for the worker's SIGTERM


def interrupt(why: str) -> bool:
    """The run's limit came (the worker's SIGTERM handler calls this once the script has
    ended): cut the stage running now, if any, and run no further one. False if no
    after-work is running."""
    work = _current
    if work is None:
        return False
    work.stop(why)
    return True


class AfterWork:
    """`work.run("func", draw)` for each stage, then `work.diagnostic()`."""

    def __init__(self, deadline: float | None, clock: Callable[[], float] = time.monotonic):
        """`deadline`: when the run's limit falls, on `clock`; None: no bound."""
        self.clock = clock
        self.started = clock()
        self.until = None if deadline is None else \
            min(self.started + AFTER_WORK_MAX_S, deadline - REPORT_RESERVE_S)
        self.cut: tuple[str, float, str] | None = None  # (stage, its seconds, why)
        self.not_run: list[str] = []  # stages left out after the cut
        self._stage: str | None = None  # the stage running, while one may be interrupted
        self._stopped: str | None = None
        self._previous_alarm: Any = None

    def __enter__(self) -> AfterWork:
        global _current
        _current = self
        return self

    def __exit__(self, *exc) -> None:
        global _current
        _current = None

    def stop(self, why: str) -> None:
        self._stopped = why
        if self._stage is not None:
            raise AfterWorkCut(why)

    def left(self) -> float | None:
        return None if self.until is None else self.until - self.clock()

    def run(self, stage: str, work: Callable[[], Any]) -> Any:
        """`work()` as stage `stage`, within what is left; None if it is cut or left out."""
        if self.cut is not None:
            self.not_run.append(stage)
            return None
        if self._stopped is not None:  # the run's limit came between stages
            self.cut = (stage, 0.0, self._stopped)
            return None
        left = self.left()
        if left is not None and left <= 0:
            self.cut = (stage, 0.0, "no time was left for it before the run's limit")
            return None
        began = self.clock()
        try:
            try:
                self._arm(left)
                self._stage = stage
                if self._stopped is not None:  # the limit came while arming
                    raise AfterWorkCut(self._stopped)
                return work()
            finally:
                self._disarm()
        except (AfterWorkCut, TimeLimitExceeded) as exc:
            self._disarm()  # the alarm may have come inside the `finally` above
            if isinstance(exc, TimeLimitExceeded):  # a handler that knew no after-work
                self._stopped = exc = TIME_LIMIT
            self.cut = (stage, self.clock() - began, str(exc))
            return None

    def _arm(self, left: float | None) -> None:
        if left is None or threading.current_thread() is not threading.main_thread():
            return

        def alarm(signum, frame):
            if self._stage is not None:
                raise AfterWorkCut(f"its own bound of {self._bound():.1f} s ran out")

        self._previous_alarm = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))

    def _disarm(self) -> None:
        self._stage = None
        if self._previous_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_alarm)
            self._previous_alarm = None

    def _bound(self) -> float:
        return max(0.0, (self.until or self.started) - self.started)

    def diagnostic(self) -> Diagnostic | None:
        """What was cut, after how long, and what the page therefore lacks; None if nothing."""
        if self.cut is None:
            return None
        stage, seconds, why = self.cut
        missing = [MISSING[stage], *(MISSING[s] for s in self.not_run)]
        when = "before it began" if seconds == 0 else f"after {seconds:.1f} s"
        return diagnostic(
            "after_work_cut", "info",
            f"The script ran to its end; autograd-lab's own work after it ({DOING[stage]}) "
            f"was cut short {when}: {why}. The script's output and its recorded passes are "
            f"all kept. Not shown therefore: {'; '.join(missing)}.")
