"""The shared mode's PostgreSQL goes away during a class, and comes back (issue 39, point 3),
against a real web process and upload host on loopback and a real PostgreSQL cluster
(tests/postgres.py):

1. a teacher asks a question, six students have joined; the database is stopped;
2. the six answer at once, and meanwhile an unrelated `GET /api/scenarios` and `GET /healthz`
   are timed (a web process whose event loop waits on the database answers them late);
3. the database stays away for `--outage` seconds (the unrelated GET timed every second);
4. it is started again: seconds until a class answer goes through, and then (timed from
   that answer) until a run does (the web process's pool and the upload host's reconnect).

    .venv/bin/python bench/db_outage.py [--outage 20]

Prints one table of seconds. Not part of the test suite; every request has a timeout and goes
only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.postgres import cluster  # noqa: E402
from tests.server import serve  # noqa: E402
from tests.upload_host_process import upload_host  # noqa: E402

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
STUDENTS = 6


def _timed(call) -> tuple[float, int]:
    """(seconds, status) of one request; status 0 if it failed outright."""
    start = time.monotonic()
    try:
        status = call().status_code
    except httpx.HTTPError:
        status = 0
    return time.monotonic() - start, status


def _until(call, ok, deadline_s: float) -> float | None:
    """Seconds until `call()` answers as `ok` says (asked every 0.2 s), or None."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        try:
            if ok(call()):
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return None


def measure(outage: float) -> dict:
    rows: dict = {}
    with tempfile.TemporaryDirectory() as folder, cluster() as db, \
            serve(Path(folder), name="bench/db-outage-web", DATABASE_URL=db.url,
                  WARM_SCENARIOS="false", POOL_SIZE="0", SELFTEST="false",
                  PER_ADDRESS_PEOPLE="20") as web, \
            upload_host(db.url, Path(folder), "bench/db-outage-upload-host",
                        UPLOAD_WORKERS="1", SELFTEST="false"):
        teacher = httpx.Client(base_url=web, timeout=60)
        students = [httpx.Client(base_url=web, timeout=60) for _ in range(STUDENTS)]
        try:
            for person in (teacher, *students):
                person.get("/api/scenarios")  # a browser's cookie
                person.get("/")
            code = teacher.post("/api/classes", json={}).json()["code"]
            asked = teacher.post(f"/api/classes/{code}/question", json={
                "prompt": "which?", "choices": ["a", "b"], "answer": 0})
            assert asked.status_code == 200, asked.text
            question = asked.json()["id"]
            for student in students:
                assert student.get(f"/api/classes/{code}").status_code == 200
            assert httpx.post(f"{web}/api/runs", json={"source": SMALL},
                              timeout=120).status_code == 200

            db.stop()
            with concurrent.futures.ThreadPoolExecutor(STUDENTS + 2) as pool:
                answers = [pool.submit(_timed, lambda s=s: s.post(
                    f"/api/classes/{code}/answer", json={"question": question, "choice": 1}))
                    for s in students]
                time.sleep(0.2)  # the answers are on their way
                scenarios = pool.submit(_timed, lambda: httpx.get(f"{web}/api/scenarios",
                                                                  timeout=60))
                health = pool.submit(_timed, lambda: httpx.get(f"{web}/healthz", timeout=60))
                answered = [a.result() for a in answers]
                rows["GET /api/scenarios during 6 answers"] = scenarios.result()
                rows["GET /healthz during 6 answers"] = health.result()
            rows["slowest class answer (refused)"] = max(answered)
            worst = (0.0, 0)
            end = time.monotonic() + outage
            while time.monotonic() < end:
                worst = max(worst, _timed(lambda: httpx.get(f"{web}/api/scenarios", timeout=60)))
                _timed(lambda: students[0].post(f"/api/classes/{code}/answer",
                                                json={"question": question, "choice": 1}))
                time.sleep(1)
            rows[f"slowest GET /api/scenarios over the {outage:.0f} s outage"] = worst

            db.start()
            rows["database back -> a class answer goes through"] = (_until(
                lambda: students[1].post(f"/api/classes/{code}/answer",
                                         json={"question": question, "choice": 0}),
                lambda r: r.status_code == 200, 300), 200)
            rows["database back -> a run goes through"] = (_until(
                lambda: httpx.post(f"{web}/api/runs", json={"source": SMALL}, timeout=120),
                lambda r: r.status_code == 200, 300), 200)
            tally = teacher.get(f"/api/classes/{code}").json()
            rows["answers the teacher sees afterwards"] = (
                sum((tally.get("question") or {}).get("tally") or [0]), 200)
        finally:
            for person in (teacher, *students):
                person.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=20.0,
                        help="seconds the database stays away (default 20)")
    args = parser.parse_args()
    rows = measure(args.outage)
    print(f"{'what':<58} {'seconds':>8} {'status':>6}")
    for what, (seconds, status) in rows.items():
        shown = "never" if seconds is None else f"{seconds:.2f}"
        print(f"{what:<58} {shown:>8} {status:>6}")


if __name__ == "__main__":
    main()
