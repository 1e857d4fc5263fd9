"""A run whose Trace outgrows the report bound comes back smaller, not refused (issue 24: a
script with tens of thousands of nodes per pass and 10 events ended as TraceTooLarge)."""

from __future__ import annotations

from app.runner import Policy, ResourceLimits, trace_in_sandbox
from tests.format.test_shrink import BIG


def test_a_trace_past_the_report_bound_comes_back_smaller_and_says_so():
    doc = trace_in_sandbox(source=BIG, name="big.py", timeout=60,
                           policy=Policy(limits=ResourceLimits(report_mb=1)))
    assert doc["error"] is None, doc["error"]
    (said,) = [d for d in doc["diagnostics"] if d["code"] == "trace_shrunk"]
    assert "more than the 1.0 MiB a run's report may take" in said["message"]
    backward = [e for e in doc["events"] if e["kind"] == "backward"]
    assert backward and len(backward) + doc.get("events_skipped", {}).get("backward", 0) == 3
