"""The worker's report is written in the folder the script runs in, so a script can write one
itself. A forged report is refused whole, never shown."""

from __future__ import annotations

from app.runner import trace_in_sandbox

FORGED = """
import json, os
doc = {"format": "autograd-lab/trace@1", "script": {"name": "x.py", "source": ""},
       "events": [{"kind": "backward", "index": 0, "graph": {"nodes": [
           {"id": "n0", "name": "x", "kind": "<<TABLE>>"}], "edges": []}}],
       "params": {}, "diagnostics": [], "error": "not a record"}
with open("trace.json", "w") as f:
    json.dump(doc, f)
os._exit(0)
"""


def test_a_report_written_by_the_script_is_refused():
    doc = trace_in_sandbox(source=FORGED, name="forge.py", timeout=30)
    assert doc["error"]["type"] == "WorkerFailed"
    assert "not a valid trace" in doc["error"]["message"]
    assert doc["events"] == []  # nothing of the forged report is kept


WRITE = "with open('trace.json', 'w') as f:\n    json.dump(report, f)\nos._exit(0)\n"
# the same, once the run's time limit reaches it (the worker's SIGTERM raises into the script,
# which catches it): a real time-out, as the supervisor sees it, with the script's report
AT_THE_LIMIT = ("import time\ntry:\n    while True:\n        time.sleep(0.05)\n"
                "except BaseException:\n" + "".join(f"    {line}\n"
                                                      for line in WRITE.splitlines()))


def _forging(claim: dict, kind: str = "RuntimeError", then: str = WRITE) -> str:
    """A script that writes a schema-valid report of its own: a failure explained with a fix
    that edits the script's line `x = 1`, and a `tried` that claims it was verified."""
    import json

    from app.format import error_record, new_document

    doc = new_document("forge.py", "", "cpu", None)
    doc["error"] = error_record(kind, "forged", 3, explanation={
        "code": "graph_freed", "what": "forged", "line": 3, "nodes": [], "event": None,
        "scenario": None, "fix": {"say": "forged", "edits": [
            {"line": 3, "before": "x = 1", "after": "x = 2"}], "tried": claim}})
    text = json.dumps(json.dumps(doc))
    return "import json, os\nreport = json.loads(" + text + ")\nx = 1\n" + then


def test_a_report_cannot_claim_its_fix_was_verified():
    """A fix is "verified" only by the server's own trial (app/runner/fix_trial.py): a report's
    claim is dropped, and the one trial runs the person's own script, edited."""
    claim = {"ran": True, "error": None, "message": None, "backwards": 1}
    doc = trace_in_sandbox(source=_forging(claim), name="forge.py", timeout=30)
    assert doc["error"]["type"] == "RuntimeError", doc["error"]
    tried = doc["error"]["explanation"]["fix"]["tried"]
    assert tried != claim
    # the trial ran the edited script, which forged a failure of its own again: not verified
    assert tried["ran"] is True and tried["error"] == "RuntimeError", tried


def test_a_fix_no_trial_runs_for_keeps_no_claim():
    """A failure the server does not try (a time-out, one the supervisor saw: the run reached
    its limit): the report's "verified" is dropped and nothing stands in its place, so the
    page says the change was not run."""
    claim = {"ran": True, "error": None, "message": None, "backwards": 1}
    doc = trace_in_sandbox(source=_forging(claim, kind="Timeout", then=AT_THE_LIMIT),
                           name="forge.py", timeout=3)
    assert doc["error"]["type"] == "Timeout", doc["error"]
    assert "tried" not in doc["error"]["explanation"]["fix"]


def test_a_timeout_the_supervisor_did_not_see_is_the_scripts_own():
    """A report's Timeout from a run that ended at once is the script's own class of that
    name (`__main__.Timeout`): an exception like any other, its fix tried as any other's
    (and the claim dropped), never the server's time limit."""
    claim = {"ran": True, "error": None, "message": None, "backwards": 1}
    doc = trace_in_sandbox(source=_forging(claim, kind="Timeout"), name="forge.py", timeout=30)
    assert doc["error"]["type"] == "__main__.Timeout", doc["error"]
    tried = doc["error"]["explanation"]["fix"]["tried"]
    assert tried != claim and tried["ran"] is True, tried
