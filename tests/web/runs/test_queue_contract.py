"""What every upload queue must do (app/web/runs/queue.py, `RunQueue`), run against each
implementation with real upload hosts: submit and get the stored Trace, a place in line behind a
running run, a stop while waiting and while running, a person's share (429) and a full line
(503).

To test another implementation (a queue whose upload hosts are on other machines), add a factory to
IMPLEMENTATIONS: it yields a `QueueUnderTest` whose queue has ONE upload host, lets each person run
one and queue one, and has room for two runs in all (one running, one waiting).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.web.runs.gate import Busy
from app.web.runs.in_process_queue import InProcessQueue
from app.web.runs.queue import RunEnded, RunQueue, Submission, UnknownRun
from app.web.runs.run_book import TooMany
from app.web.runs.trace_service import TraceService
from app.web.settings import Settings
from app.web.store.sqlite import RunStore
from tests.upload_host_process import queue_result

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
# runs until stopped (or its limit): "running" for as long as a test needs
LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"
LIMIT = 60.0


@dataclass
class QueueUnderTest:
    queue: RunQueue
    store: RunStore  # where the queue's results are stored


@contextmanager
def in_process(folder: Path) -> Iterator[QueueUnderTest]:
    """Today's queue: the upload lane of a TraceService (with its fork server, as served)."""
    settings = Settings(upload_workers=1, queue_size=1, pool_size=0, per_client_running=1,
                        per_client_queued=1, upload_timeout=LIMIT, warm_scenarios=False,
                        selftest=False)
    traces = TraceService(settings)
    store = RunStore(folder / "runs.sqlite3").open()
    traces.start()
    try:
        yield QueueUnderTest(InProcessQueue(traces.uploads, store, settings.per_client_running,
                                            settings.per_client_queued), store)
    finally:
        traces.stop()


@contextmanager
def shared(folder: Path, postgres_url: str) -> Iterator[QueueUnderTest]:
    """The queue past one machine: the line in a real PostgreSQL (Procrastinate), its one upload
    host an `autograd-lab upload-host` process with one slot (shared_queue.py, upload_host.py)."""
    from app.web.runs.shared_queue import SharedQueue
    from app.web.store.postgres import PostgresRunStore
    from tests.postgres import fresh_database
    from tests.upload_host_process import upload_host

    database = fresh_database(postgres_url)
    store = PostgresRunStore(database, pool_size=4).open()
    with upload_host(database, folder, "contract-upload-host", UPLOAD_WORKERS="1",
                       UPLOAD_TIMEOUT=str(LIMIT)):
        queue = SharedQueue(store, running=1, queued=1, queue_size=1)
        try:
            yield QueueUnderTest(queue, store)
        finally:
            queue.close()
    store.close()


IMPLEMENTATIONS: dict[str, Callable[..., contextmanager]] = {"in-process": in_process,
                                                              "shared": shared}


@pytest.fixture(scope="module", params=["in-process",
                                        pytest.param("shared", marks=pytest.mark.postgres)])
def under_test(request, tmp_path_factory) -> Iterator[QueueUnderTest]:
    folder = tmp_path_factory.mktemp("queue")
    extra = [request.getfixturevalue("postgres_url")] if request.param == "shared" else []
    with IMPLEMENTATIONS[request.param](folder, *extra) as made:
        yield made


def submit(queue: RunQueue, client: str, source: str) -> str:
    return queue.submit(Submission(client, "script.py", source, "cpu", LIMIT))


def result(queue: RunQueue, run_id: str, timeout: float = 120) -> dict:
    return queue_result(queue, run_id, timeout)


def wait_for(predicate, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def state(queue: RunQueue, run_id: str) -> str:
    return queue.status(run_id)["state"]


@pytest.fixture
def queue(under_test) -> Iterator[RunQueue]:
    """The queue, emptied after each test: whatever a test left queued or running is stopped
    (so that the next test finds the one upload host free)."""
    submitted: list[str] = []
    real_submit = under_test.queue.submit

    class Tracked:
        def __getattr__(self, name):
            return getattr(under_test.queue, name)

        def submit(self, run: Submission) -> str:
            run_id = real_submit(run)
            submitted.append(run_id)
            return run_id

    yield Tracked()
    for run_id in submitted:
        try:
            under_test.queue.cancel(run_id)
        except (RunEnded, UnknownRun):
            pass
        # a stop ends a run whose worker is still starting at once (it no longer waits for
        # the fork server to import torch: test_stop_while_starting_server.py); a run left
        # behind would count against the next tests' person (TooMany)
        wait_for(lambda run_id=run_id: state(under_test.queue, run_id) not in ("queued", "running"),
                 30)


def test_a_run_gives_its_trace_stored_and_says_done(queue, under_test):
    run_id = submit(queue, "ann", SMALL)
    other = submit(queue, "bob", SMALL)
    assert run_id != other and under_test.store.get(run_id) is None  # not stored before it ends
    assert queue.owner(run_id) == "ann" and queue.owner(other) == "bob"
    assert state(queue, run_id) in ("queued", "running")
    doc = result(queue, run_id)
    assert doc["error"] is None and doc["params"]["w"]["uses"] == {"0": 2}  # w * w: two uses
    assert under_test.store.get(run_id) == doc  # stored before it was handed out
    status = queue.status(run_id)
    assert status["state"] == "done" and status["id"] == run_id and status["place"] is None
    # what the page decides by without fetching the Trace: one backward recorded, no error
    assert status["events"] == len(doc["events"]) == 1 and status["error_type"] is None
    # held parsed while the queue knows it: the same Trace as the store's (or None: asked there)
    recent = queue.recent(run_id)
    assert recent is None or recent == under_test.store.get(run_id)
    with pytest.raises(RunEnded):
        queue.cancel(run_id)


def test_a_script_that_failed_before_recording_says_so_in_its_status(queue):
    run_id = submit(queue, "ann", "import torch\nraise ValueError('no data')\n")
    doc = result(queue, run_id)
    assert doc["error"]["type"] == "ValueError"
    status = queue.status(run_id)
    assert status["state"] == "done" and status["events"] == 0
    assert status["error_type"] == "ValueError"


def test_a_second_run_waits_its_place_and_a_stop_takes_it_out_of_line(queue, under_test):
    first = submit(queue, "ann", LOOP)
    wait_for(lambda: state(queue, first) == "running")
    second = submit(queue, "bob", SMALL)  # another person: it waits for the one upload host
    time.sleep(0.5)
    status = queue.status(second)
    assert status["state"] == "queued" and status["place"] == 1, status
    assert status["running"] == 1 and status["waiting"] == 1
    assert queue.status(first)["place"] is None

    asked = time.monotonic()
    stopped = queue.cancel(second)
    assert stopped["state"] == "stopped" and time.monotonic() - asked < 2  # at once, not after
    doc = result(queue, second)
    assert doc["error"]["type"] == "Stopped" and "before it started" in doc["error"]["message"]
    assert under_test.store.get(second)["error"]["type"] == "Stopped"
    assert state(queue, first) == "running"  # the stop was that run's alone


def test_a_stop_ends_a_running_run_within_seconds(queue, under_test):
    run_id = submit(queue, "ann", LOOP)
    wait_for(lambda: state(queue, run_id) == "running")
    time.sleep(1.0)  # its upload host is started and looping
    asked = time.monotonic()
    assert queue.cancel(run_id)["state"] == "stopped"
    assert time.monotonic() - asked < 10
    doc = result(queue, run_id)
    # stopped in its upload host, which had run it for a while (not taken out of the line)
    assert doc["error"]["type"] == "Stopped" and "stopped on request after" in doc["error"][
        "message"] and doc["script"]["source"] == LOOP
    assert under_test.store.get(run_id)["error"]["type"] == "Stopped"
    # the upload host is free again: the next run runs to its Trace
    after = submit(queue, "bob", SMALL)
    assert result(queue, after)["error"] is None


def test_a_persons_share_and_a_full_line_are_refused_at_once(queue):
    first = submit(queue, "ann", LOOP)
    second = submit(queue, "ann", LOOP)  # ann's one waiting run
    with pytest.raises(TooMany):
        submit(queue, "ann", SMALL)
    with pytest.raises(Busy):  # one running and one waiting: the line is full for everyone
        submit(queue, "bob", SMALL)
    assert {state(queue, first), state(queue, second)} <= {"queued", "running"}
    with pytest.raises(UnknownRun):
        queue.cancel("never-sent")
    assert queue.status("never-sent") is None and queue.owner("never-sent") is None


def test_a_wait_that_times_out_is_forgotten(queue, under_test):
    """A status request that waits (`?wait=`) and times out leaves nothing behind: a client
    asking again and again while a long run goes on must not grow what the queue keeps."""
    run_id = submit(queue, "ann", LOOP)
    wait_for(lambda: state(queue, run_id) == "running")

    async def ask_often():
        for _ in range(20):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(queue.result(run_id), 0.05)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, ask_often()).result()
    kept = getattr(under_test.queue, "_waiters", None)  # the in-process queue's own record
    if kept is not None:
        assert not kept.get(run_id), kept.get(run_id)
    assert state(queue, run_id) == "running"  # the waits did not touch the run


def test_whose_run_it_is_is_remembered_after_it_ended(queue, under_test):
    """Only a run's starter may send it to a class's teacher: the queue says whose it is, also
    once it has ended (the classroom no longer keeps a list of its own)."""
    run_id = submit(queue, "ann", SMALL)
    result(queue, run_id)
    assert queue.started_by(run_id) == "ann"
    assert queue.started_by("never-sent") is None


def test_the_latest_runs_say_whose_each_is_newest_first(queue, under_test):
    """The admin page's runs per person (RunQueue.latest): each run's person, name and state,
    the newest first, at most as many as asked for."""
    first = submit(queue, "ann", SMALL)
    result(queue, first)
    second = submit(queue, "bob", LOOP)
    wait_for(lambda: state(queue, second) == "running")
    latest = queue.latest(500)
    mine = [r for r in latest if r["id"] in (first, second)]
    assert [(r["id"], r["client"]) for r in mine] == [(second, "bob"), (first, "ann")]
    assert mine[0]["state"] == "running" and mine[1]["state"] in ("done", "stored")
    assert all(r["age_s"] >= 0 for r in mine)
    assert len(queue.latest(1)) == 1 and queue.latest(1)[0]["id"] == second
