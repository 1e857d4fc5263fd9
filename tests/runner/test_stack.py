"""The worker's C stack is large enough to free deep graphs (torch recurses when it frees a
graph whose nodes Python has wrapped, and a 60k-node chain overflowed the default 8 MiB)."""

from __future__ import annotations

from app.runner import trace_in_sandbox

SCRIPT = """
import resource
import torch
soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
print(soft)
w = torch.ones(1, requires_grad=True)
(w * 2).sum().backward()
"""


def test_worker_runs_with_a_large_stack():
    doc = trace_in_sandbox(source=SCRIPT, name="stack.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    soft = int(doc["stdout"].strip())
    assert soft == -1 or soft >= 1 << 30  # RLIM_INFINITY or at least 1 GiB


def test_trace_does_not_reveal_server_paths():
    doc = trace_in_sandbox(source=SCRIPT, name="stack.py", timeout=60)
    assert "read" not in doc["sandbox"]["landlock"]
    assert "/.venv" not in str(doc["sandbox"]) and "/root" not in str(doc["sandbox"])


THREADS = """
import threading, time
import torch

def vm_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1])

before = vm_kib()
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(4)]
for t in threads:
    t.start()
print(vm_kib() - before)
stop.set()
w = torch.ones(1, requires_grad=True)
(w * 2).sum().backward()
"""


def test_threads_get_ordinary_stacks():
    """The large main-thread stack must not be every thread's: 4 threads, not 4 GiB."""
    doc = trace_in_sandbox(source=THREADS, name="threads.py", timeout=60)
    assert doc["error"] is None, doc["error"]
    grew_kib = int(doc["stdout"].strip())
    # each thread maps its stack and a 64 MiB malloc arena; with the main thread's 1 GiB
    # stack limit as their default they would take over 4 GiB
    assert grew_kib < 1024 * 1024
