"""Past one machine, for real (issue 23): one PostgreSQL (Debian's, on loopback), two web
processes and two `autograd-lab upload-host` processes, all started as they are served.

- runs three people post to web A run on the upload hosts and are all read, whole, from web B;
- a cookie web A signed is one web B knows (a forged one is not);
- a looping run posted to A and running on an upload host is stopped through B within 2 s, once;
- a web process started later (A restarted) has every run and knows the cookies.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from app.web.http.clients import COOKIE
from tests.postgres import fresh_database
from tests.server import serve
from tests.upload_host_process import upload_host

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"


def _script(n: int) -> str:
    return (f"import torch\nw = torch.full((3,), {n}.0, requires_grad=True)\n"
            "(w * w).sum().backward()\n")


def _web(tmp_path_factory, name: str, database: str):
    return serve(tmp_path_factory.mktemp(name), name=f"shared/{name}", DATABASE_URL=database,
                 WARM_SCENARIOS="false", POOL_SIZE="1", TRACE_TIMEOUT="90")


def _new_cookie(response: httpx.Response) -> bool:
    return any(v.startswith(f"{COOKIE}=") for v in response.headers.get_list("set-cookie"))


@pytest.fixture(scope="module")
def course(tmp_path_factory, postgres_url):
    """(database, web A, web B): two web processes and two upload hosts on one database."""
    database = fresh_database(postgres_url)
    folder = tmp_path_factory.mktemp("upload-hosts")
    with _web(tmp_path_factory, "web-a", database) as a, \
            _web(tmp_path_factory, "web-b", database) as b, \
            upload_host(database, folder, "shared/upload-host-1", UPLOAD_WORKERS="2",
                          UPLOAD_TIMEOUT="60"), \
            upload_host(database, folder, "shared/upload-host-2", UPLOAD_WORKERS="2",
                          UPLOAD_TIMEOUT="60"):
        yield database, a, b


def test_runs_posted_to_one_web_process_are_read_whole_from_the_other_and_after_a_restart(
        course, tmp_path_factory):
    database, a, b = course
    people = [httpx.Client(base_url=a, timeout=120) for _ in range(3)]
    for person in people:
        assert _new_cookie(person.get("/"))  # a browser's first page at A: A signs it
    for person in people:  # ... and B knows it: no new cookie handed out
        assert not _new_cookie(httpx.get(b + "/", cookies=person.cookies, timeout=30))
    forged = {COOKIE: "A" * 24 + "." + "B" * 22}
    assert _new_cookie(httpx.get(b + "/", cookies=forged, timeout=30))

    posted: dict[str, int] = {}  # run id -> the number its script squared
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
        status = httpx.get(f"{b}/api/runs/{run_id}/status", timeout=30).json()
        assert status["state"] == "done" and status["events"] == 1
    cookie = people[0].cookies[COOKIE]
    for person in people:
        person.close()
    # a web process started now (A restarted): every run, and the cookies it signed before
    with _web(tmp_path_factory, "web-a-again", database) as again:
        for run_id, n in posted.items():
            _check_run(again, run_id, n)
        assert not _new_cookie(httpx.get(again + "/", cookies={COOKIE: cookie}, timeout=30))


def test_a_stop_sent_to_the_other_web_process_ends_a_running_run_once(course):
    database, a, b = course
    token_free = httpx.Client(timeout=60)  # loopback: anyone may run and stop its own runs
    sent = token_free.post(f"{a}/api/runs?wait=false", json={"source": LOOP})
    assert sent.status_code == 202, sent.text
    run_id = sent.json()["id"]
    deadline = time.monotonic() + 60
    while httpx.get(f"{b}/api/runs/{run_id}/status", timeout=30).json()["state"] != "running":
        assert time.monotonic() < deadline, "the run never started on an upload host"
        time.sleep(0.1)
    time.sleep(1.0)  # looping in its upload host
    asked = time.monotonic()
    stopped = token_free.delete(f"{b}/api/runs/{run_id}")
    took = time.monotonic() - asked
    assert stopped.status_code == 200 and stopped.json()["state"] == "stopped", stopped.text
    assert took < 2, took
    doc = httpx.get(f"{a}/api/runs/{run_id}", timeout=30).json()
    assert doc["error"]["type"] == "Stopped" and "after" in doc["error"]["message"]
    time.sleep(2)  # not retried: still stopped, run once, its job aborted
    import psycopg

    with psycopg.connect(database) as db:
        attempts, state = db.execute("SELECT attempts, state FROM uploads WHERE id = %s",
                                     (run_id,)).fetchone()
        job = db.execute("SELECT status FROM procrastinate_jobs WHERE args->>'run_id' = %s",
                         (run_id,)).fetchone()
    # run once and ended: its job aborted, or already deleted (an upload host deletes ended jobs)
    assert (attempts, state) == (1, "stopped") and job in (None, ("aborted",))


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


def test_a_scenario_is_traced_once_for_every_web_process(course):
    """A scenario one web process traced is the other's too: the same Trace, to its run's
    elapsed time and sandbox (a second tracing would differ in both)."""
    database, a, b = course
    scenario = "/api/scenarios/reused_layer/trace?k=3"  # not a default: not warmed anywhere
    first = httpx.get(a + scenario, timeout=120)
    assert first.status_code == 200 and first.json()["error"] is None
    again = httpx.get(b + scenario, timeout=120)
    assert again.status_code == 200
    assert again.json() == first.json() and "elapsed" in first.json()
    import psycopg

    with psycopg.connect(database) as db:
        assert db.execute("SELECT COUNT(*) FROM scenario_traces").fetchone()[0] == 1
