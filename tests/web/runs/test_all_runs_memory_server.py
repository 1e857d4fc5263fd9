"""The memory of all runs together is bounded (issue 20), against a real server: two runs, each
well within its own limit, cannot together take more than the server's bound for all runs;
the kernel stops one, which is told why, and the next run works. Before the bound, both ran to
the end (all runs together were bounded only by their number x run_memory_mb)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.runner.sandbox import cgroups
from tests.server import serve

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not cgroups.available()[0], reason=cgroups.available()[1])]

# 600 MiB touched and held a while: under one run's 1,024 MiB, over half the bound of all runs
HOLD = """
import time
import torch
kept = torch.ones(600 * 2**20 // 4)
time.sleep(8)
w = torch.ones(2, requires_grad=True)
(w * w).sum().backward()
"""
# the same 600 MiB, taken 10 MiB at a time: when it crosses the bound of all runs the kernel
# stops the larger run (the first), whose pages are freed before this one asks for more. Taken
# at once, the kernel could choose again before the first run's pages were freed, and stop
# both (seen here: a 865 MB and a 667 MB process killed 3 ms apart): its race, not the bound's
GRADUAL = """
import time
import torch
kept = [torch.ones(10 * 2**20 // 4) for _ in range(60) if time.sleep(0.01) is None]
time.sleep(3)
w = torch.ones(2, requires_grad=True)
(w * w).sum().backward()
"""
SMALL = "import torch\nw = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="all-runs-memory", MAX_DRAWINGS="1",
               UPLOAD_WORKERS="2", POOL_SIZE="0", WARM_SCENARIOS="false", SELFTEST="false",
               LOOPBACK_ADDRESSES_APART="true",
               RUN_MEMORY_MB="1024", ALL_RUNS_MEMORY_MB="1024") as url:
        yield url


def _run_from(base: str, address: str, source: str) -> dict:
    with httpx.Client(base_url=base, timeout=120,
                      transport=httpx.HTTPTransport(local_address=address)) as client:
        answer = client.post("/api/runs", json={"source": source})
        assert answer.status_code == 200, answer.text
        return answer.json()


def test_one_run_alone_fits_its_own_limit(base):
    doc = _run_from(base, "127.0.0.1", HOLD)
    assert doc["error"] is None, doc["error"]


def test_two_runs_within_their_own_limits_cannot_take_more_than_all_runs_may(base):
    health = httpx.get(base + "/healthz", timeout=10).json()["workers"]["all_runs_memory"]
    assert health == {"bounded": True, "detail": "all runs together may use 1,024 MiB"}
    # the second starts once the first holds its memory, and grows a step at a time (GRADUAL)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_run_from, base, "127.0.0.1", HOLD)
        time.sleep(3)
        second = pool.submit(_run_from, base, "127.0.0.2", GRADUAL)
        docs = [first.result(), second.result()]
    errors = [d["error"] for d in docs if d["error"]]
    # without the bound both would finish. With it the kernel stops one; sometimes, as it
    # chooses again before the first one's pages are freed, both (kernel 6.18, here: two kills
    # 3 ms apart, in a third of the tries). Each one stopped is told why.
    assert 1 <= len(errors) <= 2, [d["error"] for d in docs]
    for error in errors:
        assert error["type"] == "MemoryLimit"
        assert "runs on this server together" in error["message"]
        assert "within its own 1024 MiB" in error["message"]
    assert _run_from(base, "127.0.0.3", SMALL)["error"] is None
