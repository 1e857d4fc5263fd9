"""Two real web processes on loopback sharing one real PostgreSQL (AUTOGRAD_LAB_DATABASE_URL,
issue 23): runs three people post to web A are all read, whole, from web B; a cookie web A
signed is one web B knows, and a forged one it does not; web A restarted keeps both."""

from __future__ import annotations

import threading

import httpx
import pytest

from app.web.clients import COOKIE
from tests.postgres import fresh_database
from tests.server import serve

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _script(n: int) -> str:
    return (f"import torch\nw = torch.full((3,), {n}.0, requires_grad=True)\n"
            "(w * w).sum().backward()\n")


def _web(tmp_path_factory, name: str, database: str):
    return serve(tmp_path_factory.mktemp(name), name=f"shared/{name}", DATABASE_URL=database,
                 WARM_LESSONS="false", POOL_SIZE="1", UPLOAD_WORKERS="2", TRACE_TIMEOUT="90")


def _new_cookie(response: httpx.Response) -> bool:
    return any(v.startswith(f"{COOKIE}=") for v in response.headers.get_list("set-cookie"))


def test_runs_and_cookies_are_every_web_process_s_and_outlive_a_restart(tmp_path_factory,
                                                                         postgres_url):
    database = fresh_database(postgres_url)
    posted: dict[str, int] = {}  # run id -> the number its script squared
    with _web(tmp_path_factory, "web-a", database) as a, \
            _web(tmp_path_factory, "web-b", database) as b:
        people = [httpx.Client(base_url=a, timeout=120) for _ in range(3)]
        for person in people:
            assert _new_cookie(person.get("/"))  # a browser's first page at A: A signs it
        for person in people:  # ... and B knows it: no new cookie handed out
            assert not _new_cookie(httpx.get(b + "/", cookies=person.cookies, timeout=30))
        forged = {COOKIE: "A" * 24 + "." + "B" * 22}
        assert _new_cookie(httpx.get(b + "/", cookies=forged, timeout=30))

        lock, failures = threading.Lock(), []

        def post(person: httpx.Client, numbers: list[int]) -> None:
            for n in numbers:  # one at a time: a person's share is one running run
                response = person.post("/api/runs", json={"source": _script(n)})
                with lock:
                    if response.status_code != 200:
                        failures.append(response.text)
                    else:
                        posted[response.json()["run"]["id"]] = n

        shares = [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]  # ten runs from three people
        threads = [threading.Thread(target=post, args=(p, s))
                   for p, s in zip(people, shares, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not failures, failures
        assert sorted(posted.values()) == list(range(10))
        for run_id, n in posted.items():
            _check_run(b, run_id, n)
        for person in people:
            person.close()

    with _web(tmp_path_factory, "web-a-again", database) as again:  # A restarted
        for run_id, n in posted.items():
            _check_run(again, run_id, n)
        cookies = {COOKIE: people[0].cookies[COOKIE]}
        assert not _new_cookie(httpx.get(again + "/", cookies=cookies, timeout=30))


def _check_run(base: str, run_id: str, n: int) -> None:
    """The run as another process serves it: its script, and w's gradient from both uses."""
    response = httpx.get(f"{base}/api/runs/{run_id}", timeout=30)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None and doc["script"]["source"] == _script(n)
    assert doc["run"] == {"id": run_id, "link": f"/runs/{run_id}"}
    assert doc["params"]["w"]["uses"] == {"0": 2}  # w * w: two uses
    page = httpx.get(f"{base}/runs/{run_id}", timeout=30)
    assert page.status_code == 200 and f"{n}.0" in page.text  # the page shows its script
