"""autograd-lab's own work after the script has a time bound of its own (issue 34): when it
runs out, what it was drawing is left out and said so, while the script's result and its
recorded passes stand. app/trace/after_work.py; through the real worker in
tests/runner/test_after_work_limit.py."""

from __future__ import annotations

import time

import torch

from app.trace.after_work import AFTER_WORK_MAX_S, REPORT_RESERVE_S, AfterWork
from tests.trace_facts import backward_events, diagnostics, values

# a custom Function whose backward is slow: the script calls it once, gradcheck (after the
# script) once per input element, 40 times
SLOW_GRADCHECK = """\
import time
import torch


class Slow(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        time.sleep(0.25)
        return g * 2


x = torch.ones(40, requires_grad=True)
Slow.apply(x).sum().backward()
print("done", x.grad.sum().item())
"""


def test_after_work_past_its_bound_is_cut_and_the_run_stands(trace_source):
    # the run's limit 3 s from now: the after-work may take what is left less the report's
    # reserve, about 1.5 s, far less than gradcheck's 10 s of sleeping backward calls
    doc = trace_source(SLOW_GRADCHECK, deadline=time.monotonic() + 3.0)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "done 80.0\n"  # as plain Python prints it
    (event,) = backward_events(doc)  # the script's own pass is kept
    assert torch.equal(values(event["contributions"]["x"][0]["grad"]),
                       torch.full((40,), 2.0, dtype=torch.float64))
    (cut,) = diagnostics(doc, "after_work_cut")
    assert cut["level"] == "info"
    assert "(checking its custom autograd Functions with gradcheck)" in cut["message"]
    assert "Not shown therefore: the gradcheck verdicts of its custom autograd Functions" \
        in cut["message"]
    assert not diagnostics(doc, "gradcheck_passed") and not diagnostics(doc, "gradcheck_failed")


def test_after_work_within_its_bound_says_nothing(trace_source):
    fast = SLOW_GRADCHECK.replace("time.sleep(0.25)", "pass")
    doc = trace_source(fast, deadline=time.monotonic() + 60.0)
    assert doc["error"] is None, doc["error"]
    assert not diagnostics(doc, "after_work_cut")
    assert diagnostics(doc, "gradcheck_passed")


def test_no_time_left_skips_the_after_work_and_names_every_stage_left_out(trace_source):
    """The script ended with less than the report's reserve left before its limit: no
    after-work at all, and the chosen-root pass is said to be missing, not failed."""
    doc = trace_source("import torch\nw = torch.ones(2, requires_grad=True)\nout = (w * 3).sum()\n",
                       deadline=time.monotonic() + 0.5)
    assert doc["error"] is None, doc["error"]
    assert backward_events(doc) == []
    (cut,) = diagnostics(doc, "after_work_cut")
    assert "was cut short before it began" in cut["message"]
    assert "the backward pass autograd-lab runs from the tensor it chose as the root" \
        in cut["message"]


def test_the_bound_is_the_smaller_of_the_cap_and_what_is_left_less_the_reserve():
    now = [100.0]
    assert AfterWork(now[0] + 60.0, clock=lambda: now[0]).left() == AFTER_WORK_MAX_S
    assert AfterWork(now[0] + 5.0, clock=lambda: now[0]).left() == 5.0 - REPORT_RESERVE_S
    assert AfterWork(None, clock=lambda: now[0]).left() is None


def test_the_limit_after_the_script_cuts_the_after_work_and_never_the_report(monkeypatch):
    """The worker's SIGTERM handler: while the script runs, the script's time limit; once it
    has ended, a cut of the after-work running (said as the run's limit), and otherwise
    nothing, so that the report is still written within the supervisor's grace."""
    import signal

    import pytest

    from app.runner import worker
    from app.trace.after_work import TIME_LIMIT
    from app.trace.as_main import TimeLimitExceeded

    with pytest.raises(TimeLimitExceeded):
        worker._on_term(signal.SIGTERM, None)
    monkeypatch.setattr(worker, "_script_ended", True)
    worker._on_term(signal.SIGTERM, None)  # making the report: it goes on
    with AfterWork(time.monotonic() + 60) as work:
        assert work.run("func", lambda: worker._on_term(signal.SIGTERM, None) or "drawn") is None
        assert work.run("gradcheck", lambda: "checked") is None  # none after the limit
    assert work.cut[0] == "func" and work.cut[2] == TIME_LIMIT
    assert work.not_run == ["gradcheck"]
    message = work.diagnostic()["message"]
    assert "the forward graphs of the functions its torch.func transforms differentiate" in message
    assert "the gradcheck verdicts of its custom autograd Functions" in message
