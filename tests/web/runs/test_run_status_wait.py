"""`GET /api/runs/ID/status?wait=S` (the own-code page's way of waiting, app/web/routers/runs.py)
against a real server: the answer comes when the run ends, or when S seconds have passed for a
run still going, and says what the page decides by (events recorded, the error's type)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server import serve

SLEEPS = ("import time, torch\ntime.sleep(1.5)\nw = torch.ones(2, requires_grad=True)\n"
          "(w * 3).sum().backward()\n")
LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"
FAILS = "import torch\nraise KeyError('missing column')\n"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="run-status-wait", WARM_SCENARIOS="0") \
            as base, httpx.Client(base_url=base, timeout=60) as c:
        yield c


def start(client: httpx.Client, source: str) -> str:
    answer = client.post("/api/runs?wait=false", json={"source": source})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def test_one_waiting_request_hears_of_the_end(client):
    run_id = start(client, SLEEPS)
    # the script sleeps 1.5 s: without waiting, a first answer would say queued or running. A
    # wait is at most 10 s, and on a machine busy with other suites a cold run can take longer
    # than that: ask again until it ends; the answer that says so comes before its wait is up
    for _ in range(12):
        began = time.monotonic()
        status = client.get(f"/api/runs/{run_id}/status?wait=10").json()
        if status["state"] not in ("queued", "running"):
            break
    assert status["state"] == "done", status
    assert time.monotonic() - began < 9.9, "the waiting request was not told of the end"
    assert status["events"] == 1 and status["error_type"] is None
    doc = client.get(f"/api/runs/{run_id}").json()
    assert [e["kind"] for e in doc["events"]] == ["backward"]
    # the drawing of a run that just ended (the queue still holds its Trace parsed) is the
    # stored Trace's: its nodes are the event's nodes
    units = client.get(f"/api/runs/{run_id}/graph.json").json()
    assert units and client.get(f"/api/runs/{run_id}/graph.svg").status_code == 200


def test_a_run_still_going_is_answered_when_the_wait_is_over(client):
    run_id = start(client, LOOP)
    try:
        began = time.monotonic()
        status = client.get(f"/api/runs/{run_id}/status?wait=0.5").json()
        assert status["state"] in ("queued", "running"), status
        assert time.monotonic() - began < 8  # held half a second, not until the run ends
        assert "events" not in status  # nothing is stored yet
    finally:
        assert client.delete(f"/api/runs/{run_id}").status_code == 200


def test_a_script_that_failed_at_once_says_so(client):
    run_id = start(client, FAILS)
    status = client.get(f"/api/runs/{run_id}/status?wait=10").json()
    assert status["state"] == "done" and status["events"] == 0
    assert status["error_type"] == "KeyError"


@pytest.mark.parametrize("wait", ["-1", "nan", "inf", "abc"])
def test_odd_waits_are_answered_not_held(client, wait):
    run_id = start(client, "import torch\n")
    answer = client.get(f"/api/runs/{run_id}/status?wait={wait}")
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 200:
        assert answer.json()["id"] == run_id
