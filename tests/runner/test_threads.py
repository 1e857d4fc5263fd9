"""A traced run gets torch's threads as a plain run would when it has the machine alone
(issue 24: traced runs took twice as long with one thread), and one under load."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from app.runner import plain_threads, trace_in_sandbox

PRINTS_THREADS = ("import torch\nprint('threads', torch.get_num_threads())\n"
                  "w = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n")


def _threads_of(doc: dict) -> int:
    assert doc["error"] is None, doc["error"]
    return int(doc["stdout"].split()[1])


def test_a_run_has_one_thread_unless_told_and_the_cores_when_told():
    assert _threads_of(trace_in_sandbox(source=PRINTS_THREADS, name="t.py")) == 1
    told = trace_in_sandbox(source=PRINTS_THREADS, name="t.py", threads=plain_threads())
    assert _threads_of(told) == plain_threads()


def test_plain_threads_is_what_torch_gives_a_plain_run_here():
    # asked of torch itself: a plain `python -c` here, with no thread setting in its
    # environment (OMP_NUM_THREADS would decide it instead)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    plain = subprocess.run([sys.executable, "-c",
                            "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, env=env, timeout=120, check=True)
    assert plain_threads() == int(plain.stdout.split()[-1])


@pytest.mark.skipif(plain_threads() < 2, reason="one core: alone or not, one thread")
def test_the_server_gives_the_cores_to_a_run_alone_and_one_to_each_under_load(tmp_path):
    from app.web.runs.trace_service import TraceService
    from app.web.settings import Settings

    service = TraceService(Settings(max_drawings=2, pool_size=0, warm_scenarios=False,
                                    forkserver=False, store_path=str(tmp_path / "r.sqlite3")))
    service.start()
    try:
        def run(source: str) -> dict:
            with service.uploads.gate.enter():
                return service.uploads.run(source, "t.py", [], "cpu")

        assert _threads_of(run(PRINTS_THREADS)) == plain_threads()
        done: dict = {}
        sleeper = threading.Thread(target=lambda: done.update(doc=run(
            "import time\ntime.sleep(6)\n" + PRINTS_THREADS)))
        sleeper.start()
        deadline = time.monotonic() + 30
        while service.uploads.gate.load()[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _threads_of(run(PRINTS_THREADS)) == 1  # another run is running
        sleeper.join(60)
        assert _threads_of(done["doc"]) == plain_threads()  # it started alone
    finally:
        service.stop()


def test_a_run_on_a_gpu_gets_one_thread_where_a_cpu_run_gets_the_cores():
    """On an H100 machine a sandboxed worker with its 16 threads died of SIGSEGV in a 512-wide
    linear on CUDA and with one ran it (sandboxed_trace.py): a GPU run is given one."""
    assert plain_threads("cpu") == plain_threads() == len(os.sched_getaffinity(0))
    assert plain_threads("cuda") == plain_threads("cuda:1") == 1
