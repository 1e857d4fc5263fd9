"""The shared store's PostgreSQL goes away, and comes back (issue 23), against a real web
process and upload host: a run going on keeps its Trace until the database returns; uploads answer
503 with Retry-After, a stored run's page says the store
cannot be reached, /healthz says "degraded", a scenario already traced is still served; once the
database is back, the next run goes through as before. And a full line answers 503 with the
place the run would have had."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.postgres import cluster
from tests.server import serve
from tests.upload_host_process import upload_host

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"
SLOW = ("import time\nimport torch\ntime.sleep(3)\nw = torch.ones(3, requires_grad=True)\n"
        "(w * w).sum().backward()\n")
SCENARIO = "/api/scenarios/reused_layer/trace"


def test_the_database_going_away_is_said_and_scenarios_go_on(tmp_path):
    with cluster() as db, \
            serve(tmp_path, name="shared/db-down-web", DATABASE_URL=db.url,
                  WARM_SCENARIOS="false", POOL_SIZE="0", TRACE_TIMEOUT="90") as web, \
            upload_host(db.url, tmp_path, "shared/db-down-upload-host", UPLOAD_WORKERS="1"):
        first = httpx.post(f"{web}/api/runs", json={"source": SMALL}, timeout=120)
        assert first.status_code == 200, first.text
        run_id = first.json()["run"]["id"]
        assert httpx.get(web + SCENARIO, timeout=120).status_code == 200  # traced and cached
        # a run going on while the database goes away: its Trace waits for it to return
        slow = httpx.post(f"{web}/api/runs?wait=false", json={"source": SLOW}, timeout=60)
        assert slow.status_code == 202, slow.text
        slow_id = slow.json()["id"]
        deadline = time.monotonic() + 60
        while httpx.get(f"{web}/api/runs/{slow_id}/status", timeout=30).json()["state"] != \
                "running":
            assert time.monotonic() < deadline, "the slow run never started"
            time.sleep(0.1)

        db.stop()
        health = httpx.get(f"{web}/healthz", timeout=30).json()
        assert health["status"] == "degraded" and health["store"]["reachable"] is False
        asked = time.monotonic()
        sent = httpx.post(f"{web}/api/runs", json={"source": SMALL}, timeout=60)
        assert sent.status_code == 503 and sent.headers["retry-after"].isdigit(), sent.text
        assert sent.json()["code"] == "store_unavailable"
        assert time.monotonic() - asked < 10  # said in seconds, not after a browser gave up
        page = httpx.get(f"{web}/runs/{run_id}", headers={"accept": "text/html"}, timeout=60)
        assert page.status_code == 503 and "cannot be reached" in page.text
        assert "password" not in page.text.lower()
        scenario = httpx.get(web + SCENARIO, timeout=60)  # the scenarios are still served
        assert scenario.status_code == 200 and scenario.json()["error"] is None
        # away for longer than Procrastinate's worker waits for a connection (30 s), after
        # which it ends: the upload host process must outlive it and take runs again
        time.sleep(36)

        db.start()
        deadline = time.monotonic() + 90
        while True:  # the pool reconnects; the upload host's heartbeat resumes
            again = httpx.post(f"{web}/api/runs", json={"source": SMALL}, timeout=120)
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert again.status_code == 200, again.text
        assert again.json()["params"]["w"]["uses"] == {"0": 2}
        assert httpx.get(f"{web}/healthz", timeout=30).json()["status"] == "ok"
        kept = httpx.get(f"{web}/api/runs/{slow_id}?", timeout=60)
        deadline = time.monotonic() + 60
        while kept.status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
            kept = httpx.get(f"{web}/api/runs/{slow_id}", timeout=60)
        assert kept.status_code == 200, kept.text  # finished while the database was away
        assert kept.json()["error"] is None and kept.json()["params"]["w"]["uses"] == {"0": 2}


def test_a_full_line_says_where_the_run_would_have_been(tmp_path):
    with cluster() as db, \
            serve(tmp_path, name="shared/full-web", DATABASE_URL=db.url, WARM_SCENARIOS="false",
                  POOL_SIZE="0", QUEUE_SIZE="1", PER_ADDRESS_PEOPLE="10") as web, \
            upload_host(db.url, tmp_path, "shared/full-upload-host", UPLOAD_WORKERS="1"):
        people = [httpx.Client(base_url=web, timeout=60) for _ in range(3)]
        try:
            for person in people:
                person.get("/")  # a browser's cookie: three people
            ids = []
            for person in people[:2]:  # one running, one waiting: the line is full
                sent = person.post("/api/runs?wait=false", json={"source": LOOP})
                assert sent.status_code == 202, sent.text
                ids.append(sent.json()["id"])
            full = people[2].post("/api/runs?wait=false", json={"source": SMALL})
            assert full.status_code == 503 and full.headers["retry-after"].isdigit()
            assert full.json()["place"] == 2 and "number 2 in line" in full.json()["detail"]
            for person, run_id in zip(people, ids, strict=False):
                assert person.delete(f"/api/runs/{run_id}").status_code == 200
        finally:
            for person in people:
                person.close()
