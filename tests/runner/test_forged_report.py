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
