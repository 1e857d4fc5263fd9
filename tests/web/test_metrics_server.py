"""GET /metrics against a real uvicorn (issue 39), scraped with the token and read by the
Prometheus client library's own parser: each run, refusal, drawing and follower moves exactly
the sample it should, by exactly one.

One server for the module: metrics on, a token, one run per person and none waiting (so a
second run sent while one goes is refused 429), a 5 s upload limit (a Timeout in seconds),
no warm-up (only the test's own scenario run is counted).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.metrics_scrape import scrape, value
from tests.server import serve

TOKEN = "metrics-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
RAISES = "import torch\nclass MyOwnError(Exception):\n    pass\nraise MyOwnError('on purpose')\n"
SLEEPS = "import time\ntime.sleep(60)\n"
RUNS, WAITS, TIMES = ("autograd_lab_runs_total", "autograd_lab_run_queue_wait_seconds_count",
                      "autograd_lab_run_duration_seconds_count")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="metrics-server", TOKEN=TOKEN,
               METRICS="1", PER_CLIENT_RUNNING="1", PER_CLIENT_QUEUED="0",
               UPLOAD_TIMEOUT="5", UPLOAD_WORKERS="2", MAX_DRAWINGS="1", POOL_SIZE="0",
               WARM_SCENARIOS="false", SELFTEST="false", TRACE_TIMEOUT="90") as url:
        yield url


def metrics(base: str):
    response = httpx.get(base + "/metrics", headers=AUTH, timeout=10)
    assert response.status_code == 200, response.text
    return scrape(response.text)


def upload(base: str, source: str, **params) -> httpx.Response:
    return httpx.post(base + "/api/runs", json={"source": source}, headers=AUTH,
                      params=params, timeout=120)


def moved(before, after, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_the_token_guards_the_metrics(base):
    assert httpx.get(base + "/metrics", timeout=10).status_code == 401
    assert httpx.get(base + "/metrics", headers={"Authorization": "Bearer nope"},
                     timeout=10).status_code == 401
    metrics(base)


def test_a_scenario_run_is_counted_once_and_a_cache_hit_not(base):
    before = metrics(base)
    assert httpx.get(base + "/api/scenarios/reused_layer/trace", timeout=120).status_code == 200
    after = metrics(base)
    assert moved(before, after, RUNS, lane="scenario", outcome="done") == 1
    assert moved(before, after, WAITS, lane="scenario") == 1
    assert moved(before, after, TIMES, lane="scenario") == 1
    assert moved(before, after, RUNS, lane="upload", outcome="done") == 0
    # the same trace again comes from the cache: no run
    assert httpx.get(base + "/api/scenarios/reused_layer/trace", timeout=120).status_code == 200
    again = metrics(base)
    for name, labels in ((RUNS, {"outcome": "done"}), (WAITS, {}), (TIMES, {})):
        assert moved(after, again, name, lane="scenario", **labels) == 0


def test_uploads_are_counted_by_outcome(base):
    before = metrics(base)
    done = upload(base, SMALL)
    assert done.status_code == 200 and done.json()["error"] is None
    raised = upload(base, RAISES)
    assert raised.status_code == 200 and raised.json()["error"]["type"] == "MyOwnError"
    timed_out = upload(base, SLEEPS)
    assert timed_out.status_code == 200 and timed_out.json()["error"]["type"] == "Timeout"
    after = metrics(base)
    assert moved(before, after, RUNS, lane="upload", outcome="done") == 1
    assert moved(before, after, RUNS, lane="upload", outcome="ScriptError") == 1
    assert moved(before, after, RUNS, lane="upload", outcome="Timeout") == 1
    assert value(after, RUNS, lane="upload", outcome="MyOwnError") == 0  # never the script's name
    assert moved(before, after, WAITS, lane="upload") == 3
    assert moved(before, after, TIMES, lane="upload") == 3
    # the timed-out run ran past its 5 s limit: its time is in the buckets above 5 s
    assert moved(before, after, "autograd_lab_run_duration_seconds_sum", lane="upload") >= 5
    assert moved(before, after, "autograd_lab_run_duration_seconds_bucket", lane="upload",
                 le="2.0") == 2


def test_a_429_is_counted_by_its_reason_and_a_stopped_run_as_stopped(base):
    before = metrics(base)
    first = upload(base, SLEEPS, wait="false")
    assert first.status_code == 202, first.text
    run_id = first.json()["id"]
    try:
        refused = upload(base, SMALL)  # the same person, whose one run is taken
        assert refused.status_code == 429 and refused.json()["code"] == "too_many"
    finally:
        stopped = httpx.delete(f"{base}/api/runs/{run_id}", headers=AUTH, timeout=30)
    assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
    after = metrics(base)
    assert moved(before, after, "autograd_lab_refusals_total", status="429",
                 reason="too_many") == 1
    assert moved(before, after, RUNS, lane="upload", outcome="stopped") == 1
    assert moved(before, after, RUNS, lane="upload", outcome="done") == 0  # the refused one


def test_drawings_are_counted_drawn_then_cached(base):
    url = base + "/api/scenarios/reused_layer/graph.svg"
    assert httpx.get(base + "/api/scenarios/reused_layer/trace", timeout=120).status_code == 200
    before = metrics(base)
    assert httpx.get(url, params={"font": 2}, timeout=120).status_code == 200
    middle = metrics(base)
    assert moved(before, middle, "autograd_lab_drawings_total", result="drawn") == 1
    assert moved(before, middle, "autograd_lab_drawings_total", result="cached") == 0
    assert httpx.get(url, params={"font": 2}, timeout=120).status_code == 200
    after = metrics(base)
    assert moved(middle, after, "autograd_lab_drawings_total", result="cached") == 1
    assert moved(middle, after, "autograd_lab_drawings_total", result="drawn") == 0


def _first_event(stream):
    """Read up to the stream's first event; the lines' iterator, to be kept: one dropped
    midway is closed, and closes the connection with it."""
    lines = stream.iter_lines()
    for line in lines:
        if line.startswith("data:"):
            return lines
    raise AssertionError("the event stream ended before its first event")


def test_a_follower_shows_in_the_followers_gauge(base):
    teacher = httpx.Client(base_url=base, timeout=30)
    student = httpx.Client(base_url=base, timeout=30)
    try:
        assert teacher.get("/").status_code == 200 and student.get("/").status_code == 200
        started = teacher.post("/api/classes", json={}, headers=AUTH)
        assert started.status_code == 201, started.text
        code = started.json()["code"]
        assert student.get(f"/c/{code}").status_code == 200  # joins
        before = metrics(base)
        with student.stream("GET", f"/api/classes/{code}/events") as following:
            reading = _first_event(following)  # noqa: F841 - kept open (see _first_event)
            one = metrics(base)
            assert moved(before, one, "autograd_lab_class_followers") == 1
            assert moved(before, one, "autograd_lab_class_event_streams") == 1
            # the teacher's own page is an event stream, and follows nobody
            with teacher.stream("GET", f"/api/classes/{code}/events") as teaching:
                reading_too = _first_event(teaching)  # noqa: F841 - kept open
                both = metrics(base)
                assert moved(before, both, "autograd_lab_class_followers") == 1
                assert moved(before, both, "autograd_lab_class_event_streams") == 2
        # the streams closed: the server notices the pages went and counts them out
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            gone = metrics(base)
            if value(gone, "autograd_lab_class_event_streams") == \
                    value(before, "autograd_lab_class_event_streams"):
                break
            time.sleep(0.2)
        assert moved(before, gone, "autograd_lab_class_event_streams") == 0
        assert moved(before, gone, "autograd_lab_class_followers") == 0
    finally:
        teacher.close()
        student.close()
