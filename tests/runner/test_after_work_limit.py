"""A script that finishes shortly before its time limit, whose after-work (autograd-lab's
gradcheck of its custom Function) would run far past it: through the real sandboxed worker, the
run is the script's (no Timeout), its pass is kept, and the cut is said (issue 34). The margins
are wide: the script ends about 3 s before its limit, and the gradcheck alone would take 10 s."""

from __future__ import annotations

from app.runner import trace_in_sandbox
from tests.trace.test_after_work import SLOW_GRADCHECK

NEAR_THE_LIMIT = SLOW_GRADCHECK.replace("x = torch.ones", "time.sleep(5)\nx = torch.ones")


def test_after_work_past_the_limit_keeps_the_scripts_run():
    doc = trace_in_sandbox(source=NEAR_THE_LIMIT, name="near.py", timeout=8)
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"] == "done 80.0\n"
    assert [e["kind"] for e in doc["events"]] == ["backward"]
    (cut,) = [d for d in doc["diagnostics"] if d["code"] == "after_work_cut"]
    assert "checking its custom autograd Functions with gradcheck" in cut["message"]
    assert not [d for d in doc["diagnostics"] if d["code"].startswith("gradcheck")]
    assert doc["elapsed"] < 8 + 3  # written before the supervisor's SIGKILL, not lost to it


def test_a_script_past_its_own_limit_stays_a_timeout():
    doc = trace_in_sandbox(source=NEAR_THE_LIMIT.replace("time.sleep(5)", "time.sleep(60)"),
                           name="late.py", timeout=3)
    assert doc["error"]["type"] == "Timeout", doc["error"]
    assert doc["error"]["line"] == 16  # the script's sleep
    assert not [d for d in doc["diagnostics"] if d["code"] == "after_work_cut"]
