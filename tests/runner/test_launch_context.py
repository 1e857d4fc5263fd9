"""A run that reaches its time limit is a Timeout with the passes it recorded, whatever started
the CLI (issue 39). Runs from a batch job came back as "The script's process ended (exit
status 1)", log `unshare: sigprocmask unblock failed`, with no pass: the job's launcher had
SIGTERM blocked, the mask outlives fork and exec, so the limit's SIGTERM never reached the
worker and the SIGKILL after the grace period took its report (and `unshare` 2.38 cannot pass
a SIGKILL on: it exits 1 with that line). Each context here is the real CLI, in the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from app.runner.protocol import app_root

pytestmark = pytest.mark.slow  # a real run to its time limit per context

PASSES = """\
import torch
w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
for i in range(3):
    (w * w * (i + 1)).sum().backward()
"""
SCRIPT = PASSES + "while True:\n    pass\n"
LOOP_LINE = SCRIPT.count("\n") - 1

# what a job runner whose threads block signals hands its children: the blocked mask
BLOCKING_LAUNCHER = """\
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGALRM, signal.SIGINT,
                                          signal.SIGCHLD})
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def plain_grads() -> list[list[float]]:
    """w.grad after each pass, as PyTorch leaves it in a plain run of the same passes."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    after = []
    for i in range(3):
        (w * w * (i + 1)).sum().backward()
        after.append(w.grad.tolist())
    return after


@pytest.mark.parametrize("context", ["foreground", "background job", "background job, "
                                     "signals blocked"])
def test_a_run_past_its_limit_is_a_timeout_with_its_passes_in_any_launch_context(
        tmp_path, context):
    script, out = tmp_path / "loop.py", tmp_path / "trace.json"
    script.write_text(SCRIPT)
    (tmp_path / "blocking.py").write_text(BLOCKING_LAUNCHER)
    cli = [sys.executable, "-m", "app.cli", "trace", str(script), "--timeout", "4",
           "-o", str(out)]
    if context.endswith("signals blocked"):
        cli = [sys.executable, str(tmp_path / "blocking.py"), *cli[1:]]
    if context.startswith("background"):
        # a non-interactive shell's background job (SIGINT and SIGQUIT ignored), waited for
        quoted = " ".join(f"'{part}'" for part in cli)
        cmd = ["bash", "-c", f"{quoted} & wait $!"]
    else:
        cmd = cli
    env = {**os.environ, "PYTHONPATH": str(app_root())}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 1, done.stderr  # the CLI's exit status for a run that failed
    doc = json.loads(Path(out).read_text())
    assert doc["error"]["type"] == "Timeout", (doc["error"], doc.get("stderr"))
    assert doc["error"]["line"] == LOOP_LINE
    assert "sigprocmask" not in doc.get("stderr", "")
    grads = [e["grads"]["w"]["after"]["values"] for e in doc["events"]
             if e["kind"] == "backward"]
    assert grads == plain_grads()
