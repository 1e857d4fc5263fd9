"""A class across web processes (issue 23): one real PostgreSQL, web processes A and B, one
upload host, a token on both. The teacher teaches on B; a student joins and follows on A:
- the teacher's view changes reach the student's stream on A (LISTEN/NOTIFY);
- the student reconnects to B with Last-Event-ID and gets the newer state at once, and nothing
  when it has seen the newest;
- the student, a member through A, runs code on B without the token, and sends that run to the
  teacher through A: the teacher's stream on B lists it;
- a web process started later has the class: its view, its teacher's cookie still the teacher.
"""

from __future__ import annotations

import json
import queue
import threading
import time

import httpx
import pytest

from tests.postgres import fresh_database
from tests.server import serve
from tests.upload_host_process import upload_host

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOKEN = "s3cret"
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"


def _web(tmp_path_factory, name: str, database: str):
    return serve(tmp_path_factory.mktemp(name), name=f"shared/{name}", DATABASE_URL=database,
                 TOKEN=TOKEN, WARM_SCENARIOS="false", POOL_SIZE="0", SELFTEST="false",
                 LOOPBACK_MEMBERS_UNSANDBOXED="true")  # members run code, self-test or not


class Stream:
    """A class's event stream read in a thread: each event's (id, state) on a queue."""

    def __init__(self, client: httpx.Client, base: str, code: str, last: str | None = None):
        self.events: queue.Queue = queue.Queue()
        self.opened = threading.Event()  # the server answered 200 and the stream is read
        headers = {"Last-Event-ID": last} if last else {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        args=(client, f"{base}/api/classes/{code}/events",
                                              headers))
        self._thread.start()

    def _read(self, client, url, headers) -> None:
        with client.stream("GET", url, headers=headers, timeout=60) as response:
            if response.status_code != 200:
                return  # never opened: `opened` says so
            self.opened.set()
            event_id = None
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    self.events.put((event_id, json.loads(line[5:])))

    def next(self, timeout: float = 10) -> tuple[str, dict]:
        return self.events.get(timeout=timeout)

    def until(self, predicate, timeout: float = 10) -> tuple[str, dict]:
        deadline = time.monotonic() + timeout
        while True:
            event_id, state = self.next(max(0.01, deadline - time.monotonic()))
            if predicate(state):
                return event_id, state

    def close(self) -> None:
        self._stop.set()


def test_a_student_on_one_web_process_follows_a_teacher_on_another(tmp_path_factory,
                                                                    postgres_url):
    database = fresh_database(postgres_url)
    folder = tmp_path_factory.mktemp("upload-host")
    with _web(tmp_path_factory, "class-web-a", database) as a, \
            _web(tmp_path_factory, "class-web-b", database) as b, \
            upload_host(database, folder, "shared/class-upload-host", UPLOAD_WORKERS="1"):
        teacher = httpx.Client(base_url=b, timeout=60)
        student = httpx.Client(timeout=60)
        try:
            teacher.get("/")  # B signs the teacher's cookie
            started = teacher.post("/api/classes", json={},
                                   headers={"Authorization": f"Bearer {TOKEN}"})
            assert started.status_code == 201, started.text
            code = started.json()["code"]
            assert student.get(f"{a}/c/{code}").status_code == 200  # joins through A
            follow = Stream(student, a, code)
            first_id, first = follow.next()
            assert first["role"] == "student" and first["view"] is None

            asked = time.monotonic()
            shown = teacher.put(f"/api/classes/{code}/view",
                                json={"path": "/scenarios/reused_layer", "query": "k=2"})
            assert shown.status_code == 200, shown.text
            seen_id, seen = follow.until(lambda s: s["view"] is not None)
            took = time.monotonic() - asked
            assert seen["view"] == {"path": "/scenarios/reused_layer", "query": "k=2"}
            assert int(seen_id) > int(first_id) and took < 2, took
            follow.close()

            # away, then back on the other process: the newer state at once
            teacher.put(f"/api/classes/{code}/view", json={"path": "/", "query": ""})
            back = Stream(student, b, code, last=seen_id)
            newer_id, newer = back.next(timeout=5)
            assert newer["view"] == {"path": "/", "query": ""} and int(newer_id) > int(seen_id)
            back.close()
            quiet = Stream(student, a, code, last=newer_id)  # has seen the newest: nothing
            assert quiet.opened.wait(10)
            with pytest.raises(queue.Empty):
                quiet.next(timeout=1.5)
            quiet.close()

            # the teacher too resumes on the other process, though each counts its own
            # followers in the teacher's event ids
            # (A, where the student's streams came and went, counts more followers' changes
            # than B: its ids run ahead of B's for the same state)
            watching = Stream(teacher, a, code)
            watched_id, _ = watching.next()
            watching.close()
            teacher.put(f"/api/classes/{code}/view", json={"path": "/", "query": "x=1"})
            resumed = Stream(teacher, b, code, last=watched_id)
            assert resumed.opened.wait(10), "the teacher's stream on B did not open"
            _, seen_there = resumed.next(timeout=5)
            assert seen_there["role"] == "teacher"
            assert seen_there["view"] == {"path": "/", "query": "x=1"}
            resumed.close()
            teacher.put(f"/api/classes/{code}/view", json={"path": "/", "query": ""})

            # a member through A runs code on B without the token, and sends it through A
            teacher_stream = Stream(teacher, b, code)
            ran = student.post(f"{b}/api/runs", json={"source": SMALL, "name": "mine.py"})
            assert ran.status_code == 200, ran.text
            run_id = ran.json()["run"]["id"]
            sent = student.post(f"{a}/api/classes/{code}/runs", json={"run": run_id})
            assert sent.status_code == 200, sent.text
            _, listed = teacher_stream.until(lambda s: s.get("submissions"))
            assert [s["run"] for s in listed["submissions"]] == [run_id]
            assert listed["members"] == 1
            teacher_stream.close()
            stranger = httpx.Client(timeout=60)
            stranger.get(f"{a}/")
            refused = stranger.post(f"{a}/api/runs", json={"source": SMALL})
            assert refused.status_code == 401  # no member: the token, as before
            stranger.close()

            with _web(tmp_path_factory, "class-web-c", database) as c:  # started later
                state = student.get(f"{c}/api/classes/{code}").json()
                assert state["view"] == {"path": "/", "query": ""}
                again = teacher.put(f"{c}/api/classes/{code}/view",
                                    json={"path": "/scenarios/reused_layer", "query": ""})
                assert again.status_code == 200, again.text  # still this class's teacher
        finally:
            teacher.close()
            student.close()
