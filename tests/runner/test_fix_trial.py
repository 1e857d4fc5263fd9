"""A fix is offered as what it did when it ran (app/runner/fix_trial.py): the edited script
runs once more in a sandboxed worker, and the fix says whether it then ran to the end. The
scripts' outcomes are checked against plain Python first."""

from __future__ import annotations

import pytest

from app.runner import trace_in_sandbox
from app.runner.fix_trial import apply_edits

RNN = """\
import torch
torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
h = torch.zeros(1, 4)
for step in range(3):
    x = torch.randn(1, 3)
    h = cell(x, h)
    loss = h.pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# a second backward after a step: keeping the graph (the fix offered) does not save it, since the
# step changed the weight the graph saved
STALE = """\
import torch
w = torch.randn(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
loss = (w * w).sum()
loss.backward()
opt.step()
loss.backward()
"""


def plain(code: str) -> None:
    exec(compile(code, "<plain>", "exec"), {})  # noqa: S102 - the test's own script


def test_a_fix_that_works_is_verified_by_running_it(pool):
    doc = trace_in_sandbox(pool=pool, source=RNN, name="rnn.py", timeout=60, wait=60)
    fix = doc["error"]["explanation"]["fix"]
    assert fix["tried"] == {"ran": True, "error": None, "message": None, "backwards": 3}
    plain(apply_edits(RNN, fix["edits"]))  # and plain Python agrees: it runs to the end
    # the failure's copy among the diagnostics says the same
    listed = next(d for d in doc["diagnostics"] if d["code"] == "carried_graph")
    assert listed["explanation"]["fix"]["tried"] == fix["tried"]


def test_a_fix_that_does_not_work_says_what_happened(pool):
    doc = trace_in_sandbox(pool=pool, source=STALE, name="stale.py", timeout=60, wait=60)
    ex = doc["error"]["explanation"]
    assert ex["code"] == "graph_freed"
    tried = ex["fix"]["tried"]
    assert tried["ran"] and tried["error"] == "RuntimeError", tried
    assert "inplace operation" in tried["message"]
    with pytest.raises(RuntimeError, match="inplace operation"):  # plain Python agrees
        plain(apply_edits(STALE, ex["fix"]["edits"]))


def test_edits_that_do_not_match_the_script_are_not_run():
    assert apply_edits("a = 1\nb = 2\n", [{"line": 2, "before": "b = 2", "after": "b = 3"}]) == \
        "a = 1\nb = 3\n"
    assert apply_edits("a = 1\n", [{"line": 1, "before": "a = 2", "after": "x"}]) is None
    assert apply_edits("a = 1\n", [{"line": 7, "before": "", "after": "x"}]) is None


def test_only_an_explained_failure_is_tried_and_a_reports_own_claim_is_dropped(trace_source):
    """From a review: a run that ran to the end was run again for its findings' fixes (and
    "verified", which proved nothing); a `tried` written by the report was kept."""
    from app.runner.fix_trial import fixes_to_try, forget_trials

    ran = trace_source("import torch\nw = torch.ones(2, requires_grad=True)\nh = w * 2\n"
                       "h.sum().backward()\nprint(h.grad)\n")
    assert ran["error"] is None and any(d.get("explanation") for d in ran["diagnostics"])
    assert fixes_to_try(ran) == []
    failed = trace_source(STALE, name="stale.py")
    fix = failed["error"]["explanation"]["fix"]
    assert fixes_to_try(failed) == [fix]
    fix["tried"] = {"ran": True, "error": None}  # as a forged report would say
    forget_trials(failed)
    assert "tried" not in failed["error"]["explanation"]["fix"]
    failed["error"]["type"] = "Timeout"  # the limit, not the script's autograd error
    assert fixes_to_try(failed) == []


def test_a_trial_that_cannot_start_keeps_the_runs_trace(trace_source):
    from app.runner.fix_trial import try_fixes

    failed = trace_source(STALE, name="stale.py")

    def no_worker(edited: str):
        raise OSError("no free uid")  # what a machine out of run uids raises

    try_fixes(failed, STALE, no_worker)
    tried = failed["error"]["explanation"]["fix"]["tried"]
    assert tried == {"ran": False, "why": "no worker could be started for it (OSError)"}
    assert failed["error"]["type"] == "RuntimeError"  # the run's own Trace, kept
