"""A forged report inside every count (strings, values, lists and objects), built of what
costs most per byte parsed, costs the server a bounded amount of memory: its schema check runs
inside the same one-at-a-time section as its parse and never copies the document to say where
it failed, and reports whose parse would cost more than 32 MB are parsed one at a time (issue
38, point 4: 2,064 MB for one such 29.6 MB report, 854 MB for four of 3.9 MiB at once). Sent to
a real server, as a stranger."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.server import serve
from tests.web.runs.test_forged_reports_server import SMALL, WRITE_AND_LEAVE, _rss_peak_kib

pytestmark = pytest.mark.slow

SCENARIO = "/api/scenarios/reused_layer/graph.svg"


def _forgery(objects: int, strings: int) -> str:
    """A report of `objects` one-key objects and `strings` two-letter strings in one list."""
    return ("parts = ['{\"format\":\"autograd-lab/trace@1\",\"x\":[']\n"
            f"parts.append(','.join('{{\"ab\":0}}' for i in range({objects})))\n"
            "parts.append(',')\n"
            "parts.append(','.join('\"%c%c\"' % (97 + i % 26, 97 + (i // 26) % 26) "
            f"for i in range({strings})))\n"
            "parts.append(']}')\nreport = ''.join(parts)\n" + WRITE_AND_LEAVE)


def _run(client: httpx.Client, base: str, source: str, out: list) -> None:
    response = client.post(base + "/api/runs", json={"source": source}, timeout=240)
    out.append(response.json() if response.status_code == 200 else response.text)


def test_forged_reports_within_every_count_take_bounded_memory(tmp_path):
    info: dict = {}
    with serve(tmp_path, name="report-parse-memory", info=info, POOL_SIZE="0", SELFTEST="false",
               WARM_SCENARIOS="false", UPLOAD_WORKERS="4", UPLOAD_TIMEOUT="60") as base:
        pid = info["pid"]
        assert httpx.get(base + "/healthz", timeout=30).status_code == 200
        # four reports of 3.9 MiB at once, four people (one address may have four)
        people = [httpx.Client() for _ in range(4)]
        for person in people:
            person.get(base + "/", timeout=30)
        before, out = _rss_peak_kib(pid), []
        threads = [threading.Thread(target=_run, args=(p, base, _forgery(250_000, 370_000), out))
                   for p in people]
        [t.start() for t in threads]
        [t.join() for t in threads]
        grew = (_rss_peak_kib(pid) - before) // 1024
        print(f"four 3.9 MiB forgeries at once: server peak grew {grew} MB")
        assert len(out) == 4 and all(isinstance(d, dict) for d in out), out
        for doc in out:
            assert doc["error"]["type"] == "WorkerFailed"
            assert '"script" is a required property' in doc["error"]["message"]
        assert grew < 400  # 854 MB before (each parsed and checked at once)
        # one report of 29.6 MB: its parse alone is ~430 MB; its failed check copied 1.4 GB more
        before = _rss_peak_kib(pid)
        doc = people[0].post(base + "/api/runs", json={"source": _forgery(1_900_000, 2_500_000)},
                             timeout=240).json()
        grew = (_rss_peak_kib(pid) - before) // 1024
        print(f"one 29.6 MB forgery: server peak grew {grew} MB")
        assert doc["error"]["type"] == "WorkerFailed"
        assert grew < 1000  # 2,064 MB before
        for person in people:
            person.close()
        # then a lesson's drawing comes at once and a normal run works
        started = time.monotonic()
        drawn = httpx.get(base + SCENARIO, timeout=120)
        took = time.monotonic() - started
        print(f"scenario drawing afterwards: {took:.2f} s")
        assert drawn.status_code == 200 and b"<svg" in drawn.content
        assert took < 5  # coarse, for a busy machine: the first drawing of it
        after = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120).json()
        assert after["error"] is None and after["params"]["w"]["uses"] == {"0": 2}
