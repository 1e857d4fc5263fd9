"""One person's endless loop does not stall the room (issue 14), against a real server: with
every upload worker busy on looping scripts, a scenario still answers at once (it has workers of
its own, and uploads run at a lower CPU priority), a person over their share gets 429, a stop
ends a looping run within seconds and frees its worker for the next person."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

LOOP = "import torch\nw = torch.ones(2, requires_grad=True)\nwhile True:\n    (w * w).sum()\n"
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
LIMIT = 60  # the upload limit here: the loops would hold their workers that long


def person(base: str) -> httpx.Client:
    """A browser of its own: the session cookie its first page gave it is who it is, for the
    fair share (a made-up cookie would count as none: see test_a_made_up_cookie_is_nobody)."""
    client = httpx.Client(timeout=120)
    client.get(base + "/")
    assert client.cookies.get("autograd_lab_client")
    return client


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="fair-share-server",
               MAX_DRAWINGS="2", UPLOAD_WORKERS="2",
               POOL_SIZE="2", SCENARIO_WORKERS="1", UPLOAD_TIMEOUT=str(LIMIT),
               WARM_SCENARIOS="false", PER_CLIENT_RUNNING="1", PER_CLIENT_QUEUED="1",
               SELFTEST="false", start_timeout=60) as url:
        # the pools are ready before the room arrives
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if httpx.post(url + "/api/runs", json={"source": SMALL}, timeout=120).json()[
                    "error"] is None:
                break
        yield url


def start(client: httpx.Client, base: str, source: str) -> dict:
    response = client.post(base + "/api/runs?wait=false", json={"source": source})
    assert response.status_code == 202, response.text
    return response.json()


def status(client: httpx.Client, base: str, run_id: str) -> dict:
    return client.get(f"{base}/api/runs/{run_id}/status").json()


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_scenarios_first_fair_shares_and_stop(base):
    alice, bob, carol = person(base), person(base), person(base)
    loops_started = time.monotonic()
    loop_a, loop_b = start(alice, base, LOOP), start(bob, base, LOOP)
    wait_for(lambda: status(alice, base, loop_a["id"])["state"] == "running"
             and status(bob, base, loop_b["id"])["state"] == "running")
    shown = status(alice, base, loop_a["id"])
    assert shown["limit_s"] == LIMIT and shown["elapsed_s"] >= 0 and shown["place"] is None

    # a scenario not traced yet, then again from the cache: both at once, loops or not
    for attempt in ("uncached", "cached"):
        started = time.monotonic()
        scenario = httpx.get(base + "/api/scenarios/stop_gradient/trace", timeout=60)
        took = time.monotonic() - started
        assert scenario.status_code == 200 and scenario.json()["error"] is None
        assert took < 1.0, f"{attempt} scenario took {took:.2f} s behind the looping uploads"

    # alice may have one more waiting, not two: the third is 429, with what to do
    queued = start(alice, base, SMALL)
    assert status(alice, base, queued["id"])["state"] == "queued"
    over = alice.post(base + "/api/runs?wait=false", json={"source": SMALL})
    assert over.status_code == 429 and "stop one" in over.json()["detail"]
    assert over.headers["retry-after"]

    # carol's normal run waits in line, and says where
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.update(
        r=carol.post(base + "/api/runs", json={"source": SMALL}), at=time.monotonic()))
    thread.start()

    # bob may not stop alice's run; alice stops hers, and it ends within 2 s
    assert bob.delete(f"{base}/api/runs/{loop_a['id']}").status_code == 403
    asked = time.monotonic()
    stopped = alice.delete(f"{base}/api/runs/{loop_a['id']}")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["state"] == "stopped" and time.monotonic() - asked < 2.0
    kept = alice.get(f"{base}/api/runs/{loop_a['id']}").json()  # the script is kept
    assert kept["error"]["type"] == "Stopped" and kept["script"]["source"] == LOOP

    # the freed worker serves alice's queued run and carol's before bob's loop ends
    thread.join(LIMIT)
    assert answer["r"].status_code == 200 and answer["r"].json()["error"] is None
    assert answer["at"] < loops_started + LIMIT
    assert status(bob, base, loop_b["id"])["state"] == "running"
    wait_for(lambda: status(alice, base, queued["id"])["state"] == "done")
    bob.delete(f"{base}/api/runs/{loop_b['id']}")
