"""The forward's peak is measured inside the sandbox too (seccomp and Landlock leave torch's
profiler its CPU memory events: it needs no perf_event_open), with the numbers a plain run's
profiler reads, and without a word of the profiler's in the script's stderr."""

from __future__ import annotations

from app.runner import trace_in_sandbox
from tests.trace.test_forward_memory import GRAD, NO_GRAD, SETUP, SLACK, plain_profile

from .conftest import leftovers


def test_the_forwards_peak_is_measured_in_the_sandbox(pool):
    for forward in (GRAD, NO_GRAD):
        doc = trace_in_sandbox(pool=pool, source=SETUP + forward + "loss.backward()\n",
                               name="forward_memory.py", timeout=60, wait=90)
        assert doc["error"] is None, doc["error"]
        memory = next(e for e in doc["events"] if e["kind"] == "backward")["forward_memory"]
        peak, held = plain_profile(SETUP, forward)
        assert memory["device"] == "cpu"
        assert abs(memory["peak_bytes"] - peak) < SLACK
        assert abs(memory["held_bytes"] - held) < SLACK
        assert doc["stderr"] == ""
        assert leftovers(doc) == []
