"""The shared mode's PostgreSQL goes away in the middle of a class, for longer than the pool's
reconnect limit, and comes back (issue 39, point 3), against a real web process, a real upload
host and a real PostgreSQL cluster:
- while it is away, six students answering at once are refused with 503, Retry-After and a
  sentence that says their page will catch up, and an unrelated page of the same process
  (`GET /api/scenarios`, `/healthz`) answers at once all along: no question to the database
  waits on the event loop;
- a follower's event stream stays open through the outage and gets the newest state after it;
- once it is back, the next class answer and the next run go through within seconds, and
  what the class held before (the question, an answer given before) is all there.
"""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest

from app.web.store.database import RECONNECT_S
from tests.postgres import cluster
from tests.server import serve
from tests.upload_host_process import upload_host
from tests.web.classes.test_shared_classes_server import Stream

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
STUDENTS = 6
# A bound on behaviour, not a benchmark: the page needs no database, and before this fix it
# waited behind the class answers' pool waits on the event loop (8.8 s, and 12.4 s on the
# machine the issue was found on). Measured now: under 0.2 s on an idle machine; 2 s leaves
# room for a machine shared with other test runs without letting the old freeze pass.
UNRELATED_S = 2.0
# After the database returns: measured 0.5 s (a class answer) and 1-5 s (a run); before the
# fix 18.7 s and 10.3 s after a 20 s outage, and the pool's back-off grew with the outage.
# Generous for a loaded machine, and still short of the old back-off after this outage.
BACK_S = 10.0


class Following(Stream):
    """A class's stream read in a thread, which ends quietly when the test closes it (its
    client closed under a blocked read raises EBADF: the test's doing, not the server's)."""

    def _read(self, *args) -> None:
        try:
            super()._read(*args)
        except httpx.HTTPError:
            if not self._stop.is_set():
                raise


def _timed(call) -> tuple[float, httpx.Response]:
    start = time.monotonic()
    answer = call()
    return time.monotonic() - start, answer


def _until_ok(call, within: float) -> tuple[float, httpx.Response]:
    """Seconds until `call()` answers 200 (asked every 0.2 s), and its last answer."""
    start = time.monotonic()
    while True:
        answer = call()
        took = time.monotonic() - start
        if answer.status_code == 200 or took > within:
            return took, answer
        time.sleep(0.2)


def test_a_database_outage_freezes_nothing_and_the_class_comes_back(tmp_path):
    with cluster() as db, \
            serve(tmp_path, name="shared/outage-web", DATABASE_URL=db.url,
                  WARM_SCENARIOS="false", POOL_SIZE="0", SELFTEST="false",
                  PER_ADDRESS_PEOPLE="20") as web, \
            upload_host(db.url, tmp_path, "shared/outage-upload-host", UPLOAD_WORKERS="1",
                        SELFTEST="false"):
        teacher = httpx.Client(base_url=web, timeout=60)
        students = [httpx.Client(base_url=web, timeout=60) for _ in range(STUDENTS)]
        follower = httpx.Client(base_url=web, timeout=60)
        stream = None
        try:
            for person in (teacher, *students, follower):
                person.get("/")  # a browser's signed cookie
            code = teacher.post("/api/classes", json={}).json()["code"]
            asked = teacher.post(f"/api/classes/{code}/question", json={
                "prompt": "Which?", "choices": ["a", "b"], "answer": 0})
            assert asked.status_code == 200, asked.text
            question = asked.json()["id"]
            for student in students:
                assert student.get(f"/api/classes/{code}").status_code == 200  # joined
            before = students[0].post(f"/api/classes/{code}/answer",
                                      json={"question": question, "choice": 1})
            assert before.status_code == 200, before.text
            assert follower.get(f"/api/classes/{code}").status_code == 200
            stream = Following(follower, web, code)
            seen_id, _ = stream.next()

            db.stop()
            with concurrent.futures.ThreadPoolExecutor(STUDENTS + 2) as pool:
                answers = [pool.submit(_timed, lambda s=s: s.post(
                    f"/api/classes/{code}/answer", json={"question": question, "choice": 0}))
                    for s in students[1:] + students[:1]]
                time.sleep(0.1)  # the answers are on their way
                scenarios = pool.submit(_timed, lambda: httpx.get(f"{web}/api/scenarios",
                                                                  timeout=60))
                health = pool.submit(_timed, lambda: httpx.get(f"{web}/healthz", timeout=60))
                took, page = scenarios.result()
                assert page.status_code == 200 and took < UNRELATED_S, took
                took, page = health.result()
                assert page.status_code == 200 and took < UNRELATED_S, took
                assert page.json()["status"] == "degraded"
                for future in answers:
                    _, refused = future.result()
                    assert refused.status_code == 503, refused.text
                    assert refused.headers["retry-after"].isdigit()
                    assert refused.json()["code"] == "store_unavailable"
                    assert "your page will catch up when it is back" in refused.json()["detail"]

            # away for longer than the pool keeps trying to make its connections again: it
            # has given them all up by the time the database returns
            away_until = time.monotonic() + RECONNECT_S + 5
            while time.monotonic() < away_until:
                took, page = _timed(lambda: httpx.get(f"{web}/api/scenarios", timeout=60))
                assert page.status_code == 200 and took < UNRELATED_S, took
                took, refused = _timed(lambda: students[3].post(
                    f"/api/classes/{code}/answer", json={"question": question, "choice": 0}))
                assert refused.status_code == 503 and took < UNRELATED_S, (took, refused.text)
                time.sleep(1)
            assert stream.opened.is_set() and stream._thread.is_alive()  # still following

            db.start()
            took, again = _until_ok(lambda: students[1].post(
                f"/api/classes/{code}/answer", json={"question": question, "choice": 0}),
                BACK_S)
            assert again.status_code == 200 and took < BACK_S, (took, again.text)
            took, ran = _until_ok(lambda: students[2].post(
                "/api/runs", json={"source": SMALL}, timeout=120), BACK_S + 5)
            assert ran.status_code == 200 and took < BACK_S + 5, (took, ran.text)
            assert ran.json()["error"] is None and ran.json()["params"]["w"]["uses"] == {"0": 2}

            # nothing made before the outage was lost: the question, the answer given before
            # it (b) and the one after it (a)
            state = teacher.get(f"/api/classes/{code}").json()
            assert state["question"]["id"] == question
            assert state["question"]["tally"] == [1, 1]
            # the stream that stayed open through the outage gets the teacher's next change
            assert teacher.post(f"/api/classes/{code}/reveal", json={}).status_code == 200
            newer_id, newer = stream.until(lambda s: (s.get("question") or {}).get("revealed"))
            assert int(newer_id) > int(seen_id) and newer["question"]["id"] == question
        finally:
            if stream is not None:
                stream.close()
            for person in (teacher, *students, follower):
                person.close()
