"""The memory of all runs together is bounded (issue 20), against a real server: two runs, each
well within its own limit, cannot together take more than the server's bound for all runs;
the kernel stops one, which is told why, and the next run works. Before the bound, both ran to
the end (all runs together were bounded only by their number x run_memory_mb)."""

from __future__ import annotations

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
SMALL = "import torch\nw = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="all-runs-memory", MAX_WORKERS="1",
               UPLOAD_WORKERS="2", POOL_SIZE="0", WARM_LESSONS="false", SELFTEST="false",
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
    with ThreadPoolExecutor(2) as pool:
        docs = list(pool.map(lambda a: _run_from(base, a, HOLD), ["127.0.0.1", "127.0.0.2"]))
    errors = [d["error"] for d in docs if d["error"]]
    assert len(errors) == 1, [d["error"] for d in docs]
    assert errors[0]["type"] == "MemoryLimit"
    assert "runs on this server together" in errors[0]["message"]
    assert "within its own 1024 MiB" in errors[0]["message"]
    assert _run_from(base, "127.0.0.3", SMALL)["error"] is None
