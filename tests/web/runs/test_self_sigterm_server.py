"""A script that sends itself SIGTERM (the signal the run's time limit comes as) is not told it
ran past its time limit (issue 38, an attacker's read): its error was already named the
script's own (`__main__.Timeout`, counted as ScriptError), but its words were the worker's
sentence for the server's time limit, which had not come. Against a real server; compared with
the same script run plainly, which ends killed by that signal."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

TOKEN = "sigterm-s3cret"
SELF_SIGTERM = "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(5)\n"
NORMAL = ("import torch\nw = torch.tensor([1.0, 2.0], requires_grad=True)\n"
          "(w * w).sum().backward()\nprint(w.grad.tolist())\n")


def test_a_script_that_sends_itself_sigterm_is_not_told_it_ran_out_of_time(tmp_path):
    with serve(tmp_path, name="self-sigterm-server", TOKEN=TOKEN, POOL_SIZE="0",
               WARM_SCENARIOS="false", SELFTEST="false", UPLOAD_WORKERS="1", METRICS="true",
               TRACE_TIMEOUT="20") as base:
        with httpx.Client(base_url=base, timeout=180,
                          headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            ran = client.post("/api/runs", json={"source": SELF_SIGTERM, "name": "term.py"})
            normal = client.post("/api/runs", json={"source": NORMAL, "name": "normal.py"})
            metrics = client.get("/metrics").text
    assert ran.status_code == 200, ran.text
    error = ran.json()["error"]
    plain = subprocess.run([sys.executable, "-c", SELF_SIGTERM], capture_output=True,
                           timeout=60)
    assert plain.returncode == -signal.SIGTERM  # plainly, the script ends by that signal
    assert error["type"] == "__main__.Timeout", error
    assert "time limit" not in error["message"].replace("before its time limit", ""), error
    assert "SIGTERM" in error["message"] and "before its time limit" in error["message"], error
    assert error["line"] == 2, error
    assert 'outcome="ScriptError"' in metrics and 'outcome="Timeout"' not in metrics
    assert normal.json()["error"] is None, normal.json()["error"]
    plain_normal = subprocess.run([sys.executable, "-c", NORMAL], capture_output=True,
                                  text=True, timeout=120, check=True)
    assert normal.json()["stdout"].strip() == plain_normal.stdout.strip()
