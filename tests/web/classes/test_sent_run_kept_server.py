"""A run a student sent to the teacher stays in the store while the class goes on, however
many runs come after it (issue 38, point 5: the store's bound once dropped it). A real server
whose store keeps 2 runs; the student's own later runs push out their others, not this one."""

from __future__ import annotations

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"


def test_a_run_sent_to_the_teacher_outlives_the_stores_bound(tmp_path):
    with serve(tmp_path, name="sent-run-kept-server", STORE_MAX_RUNS="2", POOL_SIZE="0",
               SELFTEST="false", LOOPBACK_ADDRESSES_APART="true", WARM_SCENARIOS="false") as base, \
            httpx.Client(base_url=base, timeout=120) as teacher, \
            httpx.Client(base_url=base, timeout=120, transport=httpx.HTTPTransport(
                local_address="127.0.0.81")) as student:
        teacher.get("/")
        code = teacher.post("/api/classes", json={}).json()["code"]
        student.get("/")
        assert student.get(f"/api/classes/{code}").status_code == 200  # joined
        ran = [student.post("/api/runs", json={"source": SMALL}).json()["run"]["id"]]
        sent = student.post(f"/api/classes/{code}/runs", json={"run": ran[0]})
        assert sent.status_code == 200, sent.text
        for _ in range(2):
            ran.append(student.post("/api/runs", json={"source": SMALL}).json()["run"]["id"])
        first, second, third = (student.get(f"/api/runs/{r}").status_code for r in ran)
        assert first == 200  # the sent one, pinned
        assert second == 404 and third == 200  # the bound of 2 took the next oldest
        assert teacher.get(f"/api/runs/{ran[0]}").status_code == 200
