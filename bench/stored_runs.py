"""40 reads of one large stored run at the same moment (issue 20: they took a server from
787 MB to 2.4 GB), against real servers on loopback: the server process's memory before and
at its peak (VmRSS, sampled every 10 ms), and the wall time until every read has its last byte.
Every other read takes gzip; each body is checked against what the store was given.

    .venv/bin/python bench/stored_runs.py [--against REV] [--megabytes 25] [--reads 40]

`--against REV` (default: the revision before stored runs were streamed) measures that
revision's server too, exported with `git archive` and started the same way, over a row as its
own `put` wrote it. This revision is measured over a row it stored and over one the previous
version stored (its first read rewrites it). Bounded: every request has a timeout and goes
only to 127.0.0.1. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.web.store.sqlite import RunStore  # noqa: E402
from bench.classroom import _archive  # noqa: E402
from tests.server import serve  # noqa: E402
from tests.web.store.test_stored_runs_served import (  # noqa: E402
    QUIET,
    PeakRss,
    big_trace,
    concurrent_reads,
    put_as_before,
    rss_mb,
    with_link,
)

BEFORE = "9c1778d11fcccfc83ca8028e80c5a0e2ca71ad6a"  # the last commit that parsed every read
RUN_ID = "big-run"
OLD_TABLE = ("CREATE TABLE runs (id TEXT PRIMARY KEY, created REAL NOT NULL, name TEXT NOT NULL, "
             "size INTEGER NOT NULL, doc BLOB NOT NULL)")


def _store(path: Path, doc: dict, as_before: bool) -> None:
    """The store file of one measurement, holding the run."""
    if as_before:  # the file as the previous version made it: its one table
        with closing(sqlite3.connect(path)) as db, db:
            db.execute(OLD_TABLE)
        put_as_before(path, doc, RUN_ID)
    else:
        RunStore(path, max_run_bytes=1 << 30).put(doc, RUN_ID)


def _blob_digest(path: Path) -> str:
    # read after the reads: this version rewrites a row the previous one stored
    with closing(sqlite3.connect(path)) as db:
        blob = db.execute("SELECT doc FROM runs WHERE id = ?", (RUN_ID,)).fetchone()[0]
    return hashlib.sha256(blob).hexdigest()


def _measure(name: str, tree: Path, doc: dict, plain: str, as_before: bool,
             reads: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        _store(Path(folder) / "runs.sqlite3", doc, as_before)
        info: dict = {}
        with serve(Path(folder), name=f"bench-stored-{name}", start_timeout=120, cwd=tree,
                   info=info, **QUIET) as base:
            pid = info["pid"]
            time.sleep(2)  # past start-up's own allocations
            before = rss_mb(pid)
            started = time.monotonic()
            with PeakRss(pid) as rss:
                results = concurrent_reads(f"{base}/api/runs/{RUN_ID}", reads, timeout=300)
            wall = time.monotonic() - started
            after = rss_mb(pid)
        expected = {"gzip": _blob_digest(Path(folder) / "runs.sqlite3"), "": plain}
    right = sum(1 for status, encoding, digest in results
                if status == 200 and expected.get(encoding) == digest)
    gzipped = sum(1 for _, encoding, _ in results if encoding == "gzip")
    return {"reads": reads, "right": right, "gzipped": gzipped, "wall": wall,
            "before": before, "peak": rss.peak, "after": after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default=BEFORE,
                        help="also measure the server of this revision (default: %(default)s)")
    parser.add_argument("--megabytes", type=int, default=25, help="the run's JSON, about")
    parser.add_argument("--reads", type=int, default=40, help="reads at the same moment")
    args = parser.parse_args()
    doc = big_trace(args.megabytes)
    text = json.dumps(with_link(doc, RUN_ID), separators=(",", ":")).encode()
    plain = hashlib.sha256(text).hexdigest()
    size = len(text) / 2**20
    del text
    gc.collect()
    rows = {"this": _measure("this", ROOT, doc, plain, False, args.reads),
            "this, a row the previous version stored": _measure(
                "this-old-row", ROOT, doc, plain, True, args.reads)}
    if args.against:
        with tempfile.TemporaryDirectory() as tmp:
            tree = _archive(args.against, Path(tmp))
            rows[args.against[:12]] = _measure("previous", tree, doc, plain, True, args.reads)
    print(f"\n{args.reads} reads at once of one stored run ({size:.0f} MiB of JSON), every "
          "other one taking gzip (2-core machine, loopback)\n")
    print("| server | right answers | gzipped | wall s | server RSS MB before → peak | "
          "growth MB | after MB |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['right']}/{r['reads']} | {r['gzipped']} | {r['wall']:.2f} | "
              f"{r['before']:.0f} → {r['peak']:.0f} | {r['peak'] - r['before']:.0f} | "
              f"{r['after']:.0f} |")
    if args.against:
        this, old = rows["this"], rows[args.against[:12]]
        growth = (this["peak"] - this["before"]) / max(old["peak"] - old["before"], 1e-9)
        print(f"\nratios this / {args.against[:12]}: memory growth {growth:.3f}, "
              f"wall time {this['wall'] / old['wall']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
