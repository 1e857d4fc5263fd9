"""A room at once, against real servers on loopback: 3 people paste a script that never ends and
27 a small one, at the same moment, while the teacher opens a lesson. Prints, for each server,
how many runs were answered or refused, the p50/p95/max time to the answer of the normal
runs, and how long the lesson took during it; and the ratios between the two servers.

    .venv/bin/python bench/classroom.py [--against REV] [--limit 20]

`--against REV` also measures the server of another revision (exported with `git archive`,
started the same way), the "previous design" this one is compared with. Bounded: 30 requests,
each with a timeout, sent only to 127.0.0.1. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server import serve  # noqa: E402

LOOP = "import torch\nw = torch.ones(2, requires_grad=True)\nwhile True:\n    (w * w).sum()\n"
SMALL = ("import torch\ntorch.manual_seed(0)\nlayer = torch.nn.Linear(3, 2)\n"
         "loss = layer(torch.randn(4, 3)).pow(2).sum()\nloss.backward()\n")
LESSON = "/api/scenarios/reused_layer/trace?k=1"  # a non-default option: not warmed at start


def _archive(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                          capture_output=True).stdout
    tar = into / "tree.tar"
    tar.write_bytes(data)
    folder = into / "tree"
    folder.mkdir()
    with tarfile.open(tar) as t:
        t.extractall(folder, filter="data")
    return folder


def _room(base: str, limit: float) -> dict:
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(31)

    def student(i: int, source: str, kind: str) -> None:
        with httpx.Client(cookies={"autograd_lab_client": f"student-{i:02d}-" + "x" * 16},
                          timeout=limit * 4 + 60) as c:
            barrier.wait()
            t0 = time.monotonic()
            try:
                code = c.post(base + "/api/runs", json={"source": source}).status_code
            except httpx.HTTPError:
                code = 0
            with lock:
                results.append((kind, code, time.monotonic() - t0))

    def teacher(out: dict) -> None:
        barrier.wait()
        time.sleep(1.0)  # the room's runs have started
        t0 = time.monotonic()
        code = httpx.get(base + LESSON, timeout=limit * 4 + 60).status_code
        out.update(code=code, seconds=time.monotonic() - t0)

    lesson: dict = {}
    threads = [threading.Thread(target=student, args=(i, LOOP if i < 3 else SMALL,
                                                      "loop" if i < 3 else "normal"))
               for i in range(30)]
    threads.append(threading.Thread(target=teacher, args=(lesson,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit * 6 + 120)
    normal = sorted(s for kind, code, s in results if kind == "normal" and code == 200)
    refused = sum(1 for _, code, _ in results if code != 200)
    q = statistics.quantiles(normal, n=20) if len(normal) >= 2 else [float("nan")] * 19
    return {"answered": len(results) - refused, "refused": refused,
            "p50": statistics.median(normal) if normal else float("nan"), "p95": q[18],
            "max": normal[-1] if normal else float("nan"),
            "lesson": lesson.get("seconds", float("nan")), "lesson_code": lesson.get("code")}


def _measure(name: str, tree: Path, limit: float) -> dict:
    with tempfile.TemporaryDirectory() as store:
        # the same settings for both, where both have them; an older server ignores the rest
        with serve(Path(store), name=f"bench-{name}", start_timeout=120, cwd=tree,
                   TRACE_TIMEOUT=str(limit), UPLOAD_TIMEOUT=str(limit)) as base:
            time.sleep(15)  # the pools (and, here, the lessons) are ready before the room comes
            return _room(base, limit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="also measure the server of this revision")
    parser.add_argument("--limit", type=float, default=20.0, help="upload wall-clock limit, s")
    args = parser.parse_args()
    rows = {"this": _measure("this", ROOT, args.limit)}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            rows[args.against] = _measure("previous", _archive(args.against, Path(tmp)),
                                          args.limit)
    print(f"\n3 looping scripts + 27 small ones at once, wall-clock limit {args.limit:g} s, "
          f"and a lesson opened during it (2-core machine, loopback)\n")
    print("| server | answered | refused | normal p50 s | normal p95 s | normal max s | "
          "lesson s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['answered']} | {r['refused']} | {r['p50']:.1f} | {r['p95']:.1f} "
              f"| {r['max']:.1f} | {r['lesson']:.2f} |")
    if args.against:
        this, old = rows["this"], rows[args.against]
        print(f"\nratios this / {args.against}: normal p95 {this['p95'] / old['p95']:.2f}, "
              f"lesson {this['lesson'] / old['lesson']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
