"""Workers that ended (or were refused) before their READY line: the machine's failures, never
a script's, since no line of a script runs before it. Counted for this process, for the metrics
(app/web/metrics.py) and /healthz: a pool's filler that starts another (`pool`), a run that
started a fresh worker in its place (`run`), and a run that gave up after its tries and was
told SandboxFailed (`gave_up`). Torch-free.

`failing()` is /healthz's "degraded": the most recent worker start of this process failed,
and no worker has reached READY since (`started`). One failed start is enough, since each is
the machine's failure and the next start follows within seconds (a pool's filler tries again
after 1 s, a run starts another at once); it lasts until a worker starts fine, however long
that takes, rather than for a window of time: "ok" after a quiet spell would be a claim that
nothing checked."""

from __future__ import annotations

import threading
import time

__all__ = ["START_FAILURES", "STAGES", "StartFailures"]

STAGES = ("pool", "run", "gave_up")
LAST_LINE = 300  # characters of the last failure's last log line kept for /healthz


class StartFailures:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(STAGES, 0)
        self._last: tuple[float, str, str] | None = None  # (monotonic time, stage, line)
        self._in_a_row = 0  # failed starts since a worker last reached READY

    def record(self, stage: str, log: str) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}: one of {', '.join(STAGES)}")
        lines = [line for line in log.strip().splitlines() if line.strip()]
        with self._lock:
            self._counts[stage] += 1
            self._in_a_row += 1
            self._last = (time.monotonic(), stage,
                          (lines[-1] if lines else "no output")[:LAST_LINE])

    def started(self) -> None:
        """A worker reached its READY line: workers start again."""
        with self._lock:
            self._in_a_row = 0

    def failing(self) -> bool:
        """Did the most recent worker start fail, with none started fine since?"""
        with self._lock:
            return self._in_a_row > 0

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def report(self) -> dict:
        """For /healthz: the counts, and the last failure's stage, age and last log line (its
        whole log is in the failed run's own Trace, for whoever sent the run); `failing` and
        `failed_in_a_row`: failed starts since a worker last reached READY."""
        with self._lock:
            last = self._last
            report: dict = dict(self._counts)
            report["failing"] = self._in_a_row > 0
            report["failed_in_a_row"] = self._in_a_row
        report["last"] = None if last is None else {
            "stage": last[1], "ago_s": round(time.monotonic() - last[0], 1), "line": last[2]}
        return report


START_FAILURES = StartFailures()  # one per process: the pools and runs of every lane
