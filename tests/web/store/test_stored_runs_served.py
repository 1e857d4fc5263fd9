"""Stored runs served without parsing them again (issue 20), against a real uvicorn on
loopback: `GET /api/runs/ID` is the gzip JSON the store keeps, sent as it is or inflated a
piece at a time; the page and the figures come from what the store keeps beside it; a row an
older version stored is still served right; and 40 reads of a large run at once cost the
server a few MB, not 40 parsed copies.

The runs are put into the store file by this process (as the server's own queue would), or
inserted with sqlite3 the way the previous version's `put` did; no script is run."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import random
import sqlite3
import threading
import time
import zlib
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from app.format.flow import gradient_flow
from app.web.http.responses import accepts_gzip
from app.web.store.sqlite import RunStore
from tests.server import serve

QUIET = {"POOL_SIZE": "0", "SELFTEST": "false", "WARM_SCENARIOS": "false",
         "FORKSERVER": "false"}
GZIP = {"Accept-Encoding": "gzip"}
IDENTITY = {"Accept-Encoding": "identity"}


def png(width: int = 3, height: int = 2) -> bytes:
    """A real PNG (grey pixels), written by hand: the figure route checks the signature."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    pixels = zlib.compress(b"".join(b"\x00" + b"\x80" * width for _ in range(height)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
            + chunk(b"IEND", b""))


def trace(name: str, params: int = 3, events: int = 2, nodes: int = 4, seed: int = 0,
          figures: list[dict] | None = None) -> dict:
    """A Trace-shaped document: a script, parameters of modules in depth order, backward
    events with a graph and each parameter's gradient after the pass. Not validated by
    anything on the way: the store keeps what it is given."""
    rng = random.Random(seed)
    names = [f"layers.{i // 2}.{'weight' if i % 2 == 0 else 'bias'}" for i in range(params)]
    return {
        "format": "autograd-lab/trace@1",
        "script": {"name": name, "source": f"# {name}\nimport torch\nprint('ünïcode')\n",
                   "args": []},
        "torch": "2.13.0+cpu", "device": "cpu", "elapsed": 1.5,
        "params": {p: {"kind": "parameter", "requires_grad": True,
                       "module": p.rsplit(".", 1)[0], "shape": [64, 64]} for p in names},
        "events": [{
            "kind": "backward", "index": e, "line": 20 + e,
            "graph": {
                "nodes": [{"id": f"n{e}-{i}", "kind": "op", "label": "AddmmBackward0",
                           "line": 10 + i % 40, "module": f"layers.{i % 24}",
                           "shape": [32, 256],
                           "summary": {"mean": rng.gauss(0, 1), "std": rng.random(),
                                       "norm": rng.random() * 10}} for i in range(nodes)],
                "edges": [{"source": f"n{e}-{i}", "target": f"n{e}-{i + 1}", "slot": 0}
                          for i in range(nodes - 1)]},
            "grads": {p: {"after": {"norm": rng.random(), "abs_mean": rng.random() / 100,
                                    "numel": 4096}} for p in names},
        } for e in range(events)],
        "diagnostics": [], "stdout": "", "stderr": "", "error": None,
        "figures": figures or [],
    }


def big_trace(megabytes: int = 40) -> dict:
    """A run of about `megabytes` MB of JSON (a big model's graphs), which parses into several
    times that in the server's memory."""
    return trace("big.py", params=200, events=4, nodes=megabytes * 1_000_000 // 4 // 260)


def with_link(doc: dict, run_id: str) -> dict:
    """What clients have always been given for a stored run: its Trace and its link."""
    return {**doc, "run": {"id": run_id, "link": f"/runs/{run_id}"}}


def put_as_before(path: Path, doc: dict, run_id: str) -> None:
    """A row as the previous version's `put` wrote it: the gzip of the Trace alone, no
    "run" link, nothing beside it."""
    blob = gzip.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"))
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                   (run_id, time.time(), doc["script"]["name"], len(blob), blob))


def rows(path: Path, table: str, run_id: str) -> int:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(f"SELECT COUNT(*) FROM {table} WHERE id = ?", (run_id,)).fetchone()[0]


def raw(base: str, path: str, headers: dict) -> tuple[httpx.Response, bytes]:
    """The answer and its body as sent (httpx would inflate gzip)."""
    with httpx.Client(timeout=30) as client, client.stream("GET", base + path,
                                                            headers=headers) as response:
        return response, b"".join(response.iter_raw())


# ---- one server over a store of small runs -----------------------------------------------

FIGURES = [{"index": 0, "via": "show", "line": 7, "width": 3, "height": 2,
            "png": base64.b64encode(png()).decode()},
           {"index": 1, "via": "savefig", "line": 9, "width": 3, "height": 2,
            "png": base64.b64encode(b"GIF89a not a png").decode()}]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store") / "runs.sqlite3"


@pytest.fixture(scope="module")
def runs(store_path) -> dict[str, dict]:
    """run id -> the Trace given to the store: one stored by this version, one by the
    previous (both with figures)."""
    store = RunStore(store_path).open()
    new = trace("new.py", seed=1, figures=FIGURES)
    old = trace("old.py", seed=2, figures=FIGURES)
    store.put(new, "new-row-1")
    put_as_before(store_path, old, "old-row-1")
    return {"new-row-1": new, "old-row-1": old}


@pytest.fixture(scope="module")
def base(store_path, runs):
    with serve(store_path.parent, name="stored-runs-server", **QUIET) as url:
        yield url


@pytest.mark.parametrize("which", ["new", "old"])
def test_gzip_is_sent_as_stored_and_inflates_to_the_trace_and_its_link(base, runs, which):
    run_id = f"{which}-row-1"
    answer, body = raw(base, f"/api/runs/{run_id}", GZIP)
    assert answer.status_code == 200, body
    assert answer.headers["content-encoding"] == "gzip"
    assert answer.headers["content-type"] == "application/json"
    assert int(answer.headers["content-length"]) == len(body)
    assert json.loads(gzip.decompress(body)) == with_link(runs[run_id], run_id)
    assert "accept-encoding" in answer.headers["vary"].lower()


@pytest.mark.parametrize("which", ["new", "old"])
@pytest.mark.parametrize("accept", ["identity", "gzip;q=0", "gzip;q=0.0, deflate", "", "br"])
def test_a_client_that_takes_no_gzip_gets_plain_json(base, runs, which, accept):
    run_id = f"{which}-row-1"
    answer, body = raw(base, f"/api/runs/{run_id}", {"Accept-Encoding": accept})
    assert answer.status_code == 200
    assert "content-encoding" not in answer.headers
    assert json.loads(body) == with_link(runs[run_id], run_id)


def test_the_plain_json_is_utf8_text_of_the_document(base, runs):
    # this version writes with orjson (app/format/json_text.py): characters past ASCII are
    # sent as UTF-8, not as \u escapes (before, byte for byte json.dumps's ASCII), and a row
    # the previous version stored is sent as the same document
    for run_id, doc in runs.items():
        body = raw(base, f"/api/runs/{run_id}", IDENTITY)[1]
        assert json.loads(body.decode("utf-8", errors="strict")) == with_link(doc, run_id)
        if run_id.startswith("new"):
            assert "print('ünïcode')".encode() in body and b"\\u00fc" not in body


def test_a_row_the_previous_version_stored_is_rewritten_once_with_its_head(base, runs,
                                                                           store_path):
    raw(base, "/api/runs/old-row-1", GZIP)
    assert rows(store_path, "run_heads", "old-row-1") == 1
    assert rows(store_path, "run_figures", "old-row-1") == 2
    with closing(sqlite3.connect(store_path)) as db:
        blob, size = db.execute("SELECT doc, size FROM runs WHERE id = 'old-row-1'").fetchone()
    stored = json.loads(gzip.decompress(blob))
    assert stored["run"] == {"id": "old-row-1", "link": "/runs/old-row-1"}
    assert size == len(blob) + len(png()) + len(b"GIF89a not a png")  # figures count too
    # read by a server of either version, the rewritten row is the same run
    assert RunStore(store_path).get("old-row-1") == runs["old-row-1"]


def test_an_etag_asked_again_is_304_and_each_encoding_has_its_own(base, runs):
    run_id = "new-row-1"
    zipped = httpx.get(f"{base}/api/runs/{run_id}", headers=GZIP, timeout=10)
    plain = httpx.get(f"{base}/api/runs/{run_id}", headers=IDENTITY, timeout=10)
    assert zipped.headers["etag"] != plain.headers["etag"]
    assert "max-age" in zipped.headers["cache-control"]
    assert "private" in zipped.headers["cache-control"]
    again = httpx.get(f"{base}/api/runs/{run_id}", timeout=10,
                      headers={**GZIP, "If-None-Match": zipped.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == zipped.headers["etag"]
    # weak comparison, one of a list, and "*"
    for tags in (f'"other", W/{zipped.headers["etag"]}', "*"):
        assert httpx.get(f"{base}/api/runs/{run_id}", timeout=10,
                         headers={**GZIP, "If-None-Match": tags}).status_code == 304
    # the other encoding's tag does not answer for this one
    other = httpx.get(f"{base}/api/runs/{run_id}", timeout=10,
                      headers={**IDENTITY, "If-None-Match": zipped.headers["etag"]})
    assert other.status_code == 200 and other.json() == with_link(runs[run_id], run_id)


def test_an_unknown_run_is_404_even_with_an_etag(base):
    answer = httpx.get(f"{base}/api/runs/nope", headers={"If-None-Match": "*"}, timeout=10)
    assert answer.status_code == 404 and "no run 'nope'" in answer.json()["detail"]
    assert "etag" not in answer.headers


@pytest.mark.parametrize("which", ["new", "old"])
def test_the_page_shows_the_runs_head(base, runs, which):
    run_id = f"{which}-row-1"
    page = httpx.get(f"{base}/runs/{run_id}", timeout=10)
    assert page.status_code == 200
    assert f"<code>{which}.py</code>" in page.text
    assert "ünïcode" in page.text  # its source, as given
    data = json.loads(page.text.split('id="page-data">')[1].split("</script>")[0])
    assert data["run"] == {"id": run_id, "name": f"{which}.py", "device": "cpu",
                           "link": f"/runs/{run_id}"}


@pytest.mark.parametrize("which", ["new", "old"])
def test_figures_and_gradient_flow_come_from_the_store(base, runs, which):
    run_id = f"{which}-row-1"
    figure = httpx.get(f"{base}/api/runs/{run_id}/figures/0.png", timeout=10)
    assert figure.status_code == 200 and figure.content == png()
    assert figure.headers["content-type"] == "image/png"
    assert httpx.get(f"{base}/api/runs/{run_id}/figures/1.png", timeout=10).status_code == 422
    missing = httpx.get(f"{base}/api/runs/{run_id}/figures/2.png", timeout=10)
    assert missing.status_code == 404 and "has 2 figure(s)" in missing.json()["detail"]
    flow = httpx.get(f"{base}/api/runs/{run_id}/gradient-flow", timeout=10)
    assert flow.status_code == 200 and flow.json() == gradient_flow(runs[run_id])
    assert flow.json()["events"]  # there was something to work out


def test_status_says_done_without_parsing_and_404_for_no_run(base, runs):
    for run_id in runs:
        status = httpx.get(f"{base}/api/runs/{run_id}/status", timeout=10).json()
        assert status == {"id": run_id, "state": "done", "link": f"/runs/{run_id}"}
    assert httpx.get(f"{base}/api/runs/nope/status", timeout=10).status_code == 404


def test_an_older_server_opens_the_file_and_reads_what_this_one_stored(store_path, runs):
    # what the previous version's insert and get do, on a file this one wrote and rewrote
    put_as_before(store_path, trace("older.py"), "older-insert")
    for run_id in runs:
        with closing(sqlite3.connect(store_path)) as db:
            blob = db.execute("SELECT doc FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
        before = json.loads(gzip.decompress(blob))
        assert {**before, "run": {"id": run_id, "link": f"/runs/{run_id}"}} \
            == with_link(runs[run_id], run_id)


# ---- pruning, by this version and by an older one (a server of their own) -----------------


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """(base URL, store file) of a server whose runs the tests drop."""
    path = tmp_path_factory.mktemp("pruned") / "runs.sqlite3"
    RunStore(path).open()
    with serve(path.parent, name="stored-runs-pruned", **QUIET) as url:
        yield url, path


def test_a_pruned_run_takes_its_head_and_figures_with_it(pruned):
    base, store_path = pruned
    first = RunStore(store_path).put(trace("first.py", figures=FIGURES))
    assert httpx.get(f"{base}/runs/{first}", timeout=10).status_code == 200
    assert rows(store_path, "run_heads", first) == 1
    assert rows(store_path, "run_figures", first) == 2
    # the bound reached: the oldest runs go, this one among them
    RunStore(store_path, max_runs=1).put(trace("last.py"))
    assert rows(store_path, "runs", first) == 0
    assert rows(store_path, "run_heads", first) == 0
    assert rows(store_path, "run_figures", first) == 0
    for path in (f"/api/runs/{first}", f"/runs/{first}", f"/api/runs/{first}/figures/0.png",
                 f"/api/runs/{first}/gradient-flow", f"/api/runs/{first}/status"):
        assert httpx.get(base + path, timeout=10).status_code == 404, path


def test_a_run_an_older_server_dropped_is_gone_though_its_head_stayed(pruned):
    base, store_path = pruned
    run_id = RunStore(store_path).put(trace("dropped.py", figures=FIGURES))
    with closing(sqlite3.connect(store_path)) as db, db:  # the previous version's prune
        db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    assert rows(store_path, "run_heads", run_id) == 1
    for path in (f"/runs/{run_id}", f"/api/runs/{run_id}/figures/0.png",
                 f"/api/runs/{run_id}"):
        assert httpx.get(base + path, timeout=10).status_code == 404, path
    RunStore(store_path).put(trace("next.py"))  # the next put sweeps what was left
    assert rows(store_path, "run_heads", run_id) == 0
    assert rows(store_path, "run_figures", run_id) == 0


@pytest.mark.parametrize(("header", "takes"), [
    ("gzip", True), ("x-gzip", True), ("deflate, gzip;q=0.5", True), ("*", True),
    ("gzip;q=0.001", True), ("GZip ; Q=1", True), ("gzip;q=0", False), ("gzip;q=0.000", False),
    ("*;q=0", False), ("gzip;q=0, *", False), ("identity", False), ("", False), (None, False),
    ("gzip;q=2", False), ("gzip;q=nan", False), ("br, zstd", False)])
def test_accept_encoding_is_read_with_its_weights(header, takes):
    assert accepts_gzip(header) is takes


def test_reads_of_one_run_at_one_time_share_one_parse_and_nobody_keeps_it(tmp_path):
    store = RunStore(tmp_path / "runs.sqlite3")
    run_id = store.put(big_trace(4))  # parsed in about 0.1 s: the readers meet in it
    barrier = threading.Barrier(8)
    got: list[dict] = []

    def read() -> None:
        barrier.wait(10)
        got.append(store.get(run_id))

    readers = [threading.Thread(target=read) for _ in range(8)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(60)
    assert len(got) == 8 and all(doc is got[0] for doc in got)
    assert "run" not in got[0]  # the Trace as it was put
    assert store.get(run_id) is not got[0]  # parsed again: not kept


# ---- 40 reads of a large run at once -------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class PeakRss:
    """The largest VmRSS of a process while the `with` block runs, sampled every 10 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def concurrent_reads(url: str, count: int, timeout: float = 120) -> list[tuple[int, str, str]]:
    """`count` GETs of `url` at the same moment, every other one taking gzip: (status,
    Content-Encoding, sha256 of the body as sent) each."""
    results: list[tuple[int, str, str]] = []
    lock, barrier = threading.Lock(), threading.Barrier(count)

    def read(i: int) -> None:
        headers = GZIP if i % 2 == 0 else IDENTITY
        digest = hashlib.sha256()
        with httpx.Client(timeout=timeout) as client:
            barrier.wait(timeout)
            try:
                with client.stream("GET", url, headers=headers) as response:
                    for piece in response.iter_raw():
                        digest.update(piece)
                    found = (response.status_code,
                             response.headers.get("content-encoding", ""), digest.hexdigest())
            except httpx.HTTPError as exc:
                found = (0, "", repr(exc))
        with lock:
            results.append(found)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 2)
    return results


@pytest.mark.slow
def test_forty_reads_of_a_large_run_at_once_cost_a_few_mb_not_forty_copies(tmp_path):
    doc = big_trace(25)
    text = json.dumps(with_link(doc, "big-run"), separators=(",", ":")).encode()
    store = RunStore(tmp_path / "runs.sqlite3", max_run_bytes=1 << 30)
    run_id = store.put(doc, "big-run")
    with closing(sqlite3.connect(store.path)) as db:
        blob = db.execute("SELECT doc FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    plain = gzip.decompress(blob)  # the identity answer is the kept gzip, inflated
    assert json.loads(plain) == with_link(doc, "big-run")
    del doc
    assert len(text) > 20e6  # tens of MB: parsed, several times that
    info: dict = {}
    with serve(tmp_path, name="stored-runs-memory", info=info, **QUIET) as base:
        pid = info["pid"]
        time.sleep(1)  # past start-up's own allocations
        before = rss_mb(pid)
        with PeakRss(pid) as rss:
            results = concurrent_reads(f"{base}/api/runs/{run_id}", 40)
    growth = rss.peak - before
    assert len(results) == 40
    expected = {"gzip": hashlib.sha256(blob).hexdigest(), "": hashlib.sha256(plain).hexdigest()}
    for status, encoding, digest in results:
        assert status == 200, digest
        assert digest == expected[encoding], encoding
    assert {encoding for _, encoding, _ in results} == {"gzip", ""}
    # parsed, a copy takes about 5 times its JSON: 40 at once would take about 200 times (the
    # previous version grew by 2.5 GB for these 22 MiB); a stream holds a few pieces of
    # 128-256 KiB (about 50 MB for the 40, threads and buffers included)
    json_mb = len(text) / 2**20
    assert growth < 8 * json_mb, f"{before:.0f} MB -> {rss.peak:.0f} MB for {json_mb:.0f} MB"


def test_a_run_dropped_between_finding_it_and_sending_it_is_404(settings, monkeypatch):
    """The review's case: a run pruned after its blob was found was a 200 cut short, with an
    application error in the log; it is a 404 now (read before the answer starts)."""
    from fastapi.testclient import TestClient

    from app.web.app import create_app
    from app.web.store.sqlite import RunStore

    app = create_app(settings())
    with TestClient(app) as client:
        store = app.state.store
        run_id = store.put(trace("gone.py"))
        found = RunStore.blob

        def found_then_dropped(self, rid):
            blob = found(self, rid)
            with self._connect() as db:  # as a prune by another request would, meanwhile
                db.execute("DELETE FROM runs WHERE id = ?", (rid,))
            return blob

        monkeypatch.setattr(RunStore, "blob", found_then_dropped)
        answer = client.get(f"/api/runs/{run_id}")
        assert answer.status_code == 404 and "no run" in answer.json()["detail"]
