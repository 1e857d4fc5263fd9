"""The worker's C stack is large enough to free deep graphs (torch recurses when it frees a
graph whose nodes Python has wrapped, and a 60k-node chain overflowed the default 8 MiB)."""

from __future__ import annotations

from app.runner import run_trace

SCRIPT = """
import resource
import torch
soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
print(soft)
w = torch.ones(1, requires_grad=True)
(w * 2).sum().backward()
"""


def test_worker_runs_with_a_large_stack():
    doc = run_trace(source=SCRIPT, name="stack.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    soft = int(doc["stdout"].strip())
    assert soft == -1 or soft >= 1 << 30  # RLIM_INFINITY or at least 1 GiB


def test_trace_does_not_reveal_server_paths():
    doc = run_trace(source=SCRIPT, name="stack.py", timeout=60)
    assert "read" not in doc["sandbox"]["landlock"]
    assert "/.venv" not in str(doc["sandbox"]) and "/root" not in str(doc["sandbox"])
