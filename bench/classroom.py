"""A room at once, against real servers on loopback. Three measurements:

1. burst: 30 students press Run on a small script at the same moment: how many runs were
   answered or refused, and p50/p95/max seconds to the answer;
2. loops: 3 of them paste a script that never ends and 27 a small one, while the teacher opens
   a lesson: the same figures for the small runs, and how long the lesson took;
3. follow: 100 students follow a class while the teacher changes the view every 2 s for 60 s:
   delivery latency p50/p95/p99 (from the teacher's change to each student's event), errors
   (streams that failed or missed a change), and the server process's memory.

    .venv/bin/python bench/classroom.py [--against REV] [--as-user NAME] [--limit 20]
                                        [--follow-seconds 60] [--early-follow 60]

`--as-user NAME` also measures this revision's server started as that ordinary user (the way
the tests start one: tests/unprivileged.py; needs root), beside root's (with `--against`, the
other revision's too). `--early-follow S`
first measures the class for S seconds from the moment the server answers, while it warms up.

`--against REV` also measures the server of another revision (exported with `git archive`,
started the same way), the "previous design" this one is compared with (a revision without
class sessions skips the follow part). Bounded: every request has a timeout and goes only to
127.0.0.1. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import pwd
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
from tests.unprivileged import as_unprivileged  # noqa: E402

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


def _quantiles(values: list[float]) -> dict:
    values = sorted(values)
    if len(values) < 2:
        nan = float("nan")
        return {"p50": values[0] if values else nan, "p95": nan, "p99": nan,
                "max": values[-1] if values else nan}
    q = statistics.quantiles(values, n=100)
    return {"p50": statistics.median(values), "p95": q[94], "p99": q[98], "max": values[-1]}


def _burst(base: str, limit: float, count: int = 30) -> dict:
    """`count` students post the same small script at the same moment."""
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count)

    def student(i: int) -> None:
        with httpx.Client(timeout=limit * 4 + 120) as c:
            c.get(base + "/")  # a session cookie of its own: a person, for the fair share
            barrier.wait()
            t0 = time.monotonic()
            try:
                code = c.post(base + "/api/runs", json={"source": SMALL}).status_code
            except httpx.HTTPError:
                code = 0
            with lock:
                results.append((code, time.monotonic() - t0))

    threads = [threading.Thread(target=student, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(limit * 6 + 180)
    answered = [s for code, s in results if code == 200]
    return {"answered": len(answered), "refused": count - len(answered), **_quantiles(answered)}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _follow(base: str, pid: int, followers: int, seconds: float, every: float) -> dict:
    """`followers` event streams on one class; the teacher changes the view every `every` s."""
    teacher = httpx.AsyncClient(base_url=base, timeout=10)
    await teacher.get("/")  # the teacher's session cookie
    started = await teacher.post("/api/classes", json={})
    if started.status_code != 201:
        await teacher.aclose()
        return {"skipped": f"no class sessions ({started.status_code})"}
    code = started.json()["code"]
    sent: dict[int, float] = {}  # version -> when the teacher's change was sent
    got: list[list[tuple[int, float]]] = [[] for _ in range(followers)]
    errors = 0
    connected = asyncio.Event()
    open_streams = 0
    limits = httpx.Limits(max_connections=followers + 10, max_keepalive_connections=0)
    students = httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(10, read=30),
                                 limits=limits)
    # each student's browser: the session cookie its first page gives it (the server caps the
    # streams of one browser, and counts followers by person)
    cookies = []
    for _ in range(followers):
        students.cookies.clear()  # a new browser: the server gives it a cookie of its own
        page = await students.get("/")
        cookies.append(page.cookies.get("autograd_lab_client", ""))
    students.cookies.clear()
    assert len(set(cookies)) == followers and all(cookies), "each student needs its own cookie"

    async def student(i: int) -> None:
        nonlocal errors, open_streams
        try:
            async with students.stream("GET", f"/api/classes/{code}/events",
                                       cookies={"autograd_lab_client": cookies[i]}) as r:
                if r.status_code != 200:
                    errors += 1
                    return
                open_streams += 1
                if open_streams == followers:
                    connected.set()
                async for line in r.aiter_lines():
                    if line.startswith("id:"):
                        got[i].append((int(line[3:].strip()), time.monotonic()))
        except (httpx.HTTPError, ValueError):
            errors += 1

    rss_before = _rss_mb(pid)
    tasks = [asyncio.create_task(student(i)) for i in range(followers)]
    try:
        await asyncio.wait_for(connected.wait(), 30)
    except TimeoutError:
        pass
    await asyncio.sleep(1)
    rss_peak = rss_before
    for n in range(int(seconds / every)):
        t0 = time.monotonic()
        answer = await teacher.put(f"/api/classes/{code}/view",
                                   json={"path": "/scenarios/reused_layer", "query": f"node=n{n}"})
        sent[answer.json()["version"]] = t0
        await asyncio.sleep(every)
        rss_peak = max(rss_peak, _rss_mb(pid))
    await asyncio.sleep(1)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await teacher.delete(f"/api/classes/{code}")
    await teacher.aclose()
    await students.aclose()
    latencies, missed = [], 0
    for events in got:
        seen = dict(events)
        for version, t0 in sent.items():
            if version in seen:
                latencies.append(seen[version] - t0)
            else:
                missed += 1
    return {"followers": followers, "changes": len(sent), "errors": errors, "missed": missed,
            **_quantiles(latencies), "rss_before": rss_before, "rss_peak": rss_peak}


def _room(base: str, limit: float) -> dict:
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(31)

    def student(i: int, source: str, kind: str) -> None:
        with httpx.Client(timeout=limit * 4 + 60) as c:
            c.get(base + "/")  # a session cookie of its own (an older server sets one too)
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


def _measure(name: str, tree: Path, limit: float, follow_seconds: float,
             early_follow: float = 0.0, uid: int | None = None) -> dict:
    with tempfile.TemporaryDirectory() as store:
        wrap = None
        if uid is not None:
            os.chown(store, uid, uid)
            wrap = functools.partial(as_unprivileged, uid=uid)
        # the same settings for both, where both have them; an older server ignores the rest
        info: dict = {}
        # QUEUE_SIZE: a burst of 30 fits the line of a server of either design
        with serve(Path(store), name=f"bench-{name}", start_timeout=120, cwd=tree, info=info,
                   wrap=wrap, TRACE_TIMEOUT=str(limit), UPLOAD_TIMEOUT=str(limit),
                   # the whole room comes from this one machine: let its address be the room
                   QUEUE_SIZE="64", PER_ADDRESS_PEOPLE="200") as base:
            started = time.monotonic()
            early = asyncio.run(_follow(base, info["pid"], 100, early_follow, 2.0)) \
                if early_follow > 0 else None
            # the pools (and the lessons, and a fork server) are ready first
            time.sleep(max(0.0, 20 - (time.monotonic() - started)))
            health = httpx.get(base + "/healthz", timeout=10).json()
            burst = _burst(base, limit)
            time.sleep(5)
            room = _room(base, limit)
            time.sleep(5)
            follow = asyncio.run(_follow(base, info["pid"], 100, follow_seconds, 2.0)) \
                if follow_seconds > 0 else {"skipped": "--follow-seconds 0"}
            return {"burst": burst, "room": room, "follow": follow, "early": early,
                    "workers": health.get("workers", {}), "lessons": health.get("lessons", {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="also measure the server of this revision")
    parser.add_argument("--limit", type=float, default=20.0, help="upload wall-clock limit, s")
    parser.add_argument("--follow-seconds", type=float, default=60.0,
                        help="how long the teacher changes the view (0: skip)")
    parser.add_argument("--as-user", metavar="NAME",
                        help="also measure this server started as that ordinary user (root only)")
    parser.add_argument("--early-follow", type=float, default=0.0, metavar="S",
                        help="first follow the class for S s from the server's first answer")
    args = parser.parse_args()
    if args.as_user and os.geteuid() != 0:
        parser.error("--as-user needs root (the server is started as root, then as NAME)")
    this = "this (root)" if args.as_user and os.geteuid() == 0 else "this"
    rows = {this: _measure("this", ROOT, args.limit, args.follow_seconds, args.early_follow)}
    if args.as_user:
        rows[f"this ({args.as_user})"] = _measure(
            f"as-{args.as_user}", ROOT, args.limit, args.follow_seconds, args.early_follow,
            uid=pwd.getpwnam(args.as_user).pw_uid)
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            tree = _archive(args.against, Path(tmp))
            os.chmod(tmp, 0o755)  # the other user reads the tree too
            rows[args.against] = _measure("previous", tree, args.limit, args.follow_seconds,
                                          args.early_follow)
            if args.as_user:
                rows[f"{args.against} ({args.as_user})"] = _measure(
                    f"previous-as-{args.as_user}", tree, args.limit, args.follow_seconds,
                    args.early_follow, uid=pwd.getpwnam(args.as_user).pw_uid)
    print("\nHow each server starts its workers (its /healthz, 20 s after start)\n")
    print("| server | forked | uploads at once | lessons warm after s |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        w, lessons = r["workers"], r["lessons"]
        print(f"| {name} | {w.get('forked', '?')} | {w.get('uploads_at_once', '?')} | "
              f"{lessons.get('warmed_in_s', '?')} |")
    print("\n30 students press Run on a small script at the same moment (2-core machine, "
          "loopback)\n")
    print("| server | answered | refused | p50 s | p95 s | max s |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        b = r["burst"]
        print(f"| {name} | {b['answered']} | {b['refused']} | {b['p50']:.1f} | {b['p95']:.1f} "
              f"| {b['max']:.1f} |")
    print(f"\n3 looping scripts + 27 small ones at once, wall-clock limit {args.limit:g} s, "
          f"and a lesson opened during it\n")
    print("| server | answered | refused | normal p50 s | normal p95 s | normal max s | "
          "lesson s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        m = r["room"]
        print(f"| {name} | {m['answered']} | {m['refused']} | {m['p50']:.1f} | {m['p95']:.1f} "
              f"| {m['max']:.1f} | {m['lesson']:.2f} |")
    print(f"\n100 students follow a class; the teacher changes the view every 2 s for "
          f"{args.follow_seconds:g} s\n")
    print("| server | changes | delivered p50 ms | p95 ms | p99 ms | max ms | errors | missed "
          "| server RSS MB before → peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        f = r["follow"]
        if "skipped" in f:
            print(f"| {name} | {f['skipped']} |  |  |  |  |  |  |  |")
            continue
        print(f"| {name} | {f['changes']} | {f['p50'] * 1000:.0f} | {f['p95'] * 1000:.0f} | "
              f"{f['p99'] * 1000:.0f} | {f['max'] * 1000:.0f} | {f['errors']} | {f['missed']} "
              f"| {f['rss_before']:.0f} → {f['rss_peak']:.0f} |")
    if args.early_follow:
        print(f"\nThe same class from the server's first answer, for {args.early_follow:g} s "
              "(while it starts and warms the lessons), against later\n")
        print("| server | delivered p50 ms early | p95 ms early | p95 ms later | errors early |")
        print("|---|---|---|---|---|")
        for name, r in rows.items():
            e, f = r["early"], r["follow"]
            later = f"{f['p95'] * 1000:.0f}" if "p95" in f else "-"
            print(f"| {name} | {e['p50'] * 1000:.0f} | {e['p95'] * 1000:.0f} | {later} | "
                  f"{e['errors']} |")
    if args.as_user:
        root, user = rows[this], rows[f"this ({args.as_user})"]
        print(f"\nratios {args.as_user} / root: burst p95 "
              f"{user['burst']['p95'] / root['burst']['p95']:.2f}, room normal p95 "
              f"{user['room']['p95'] / root['room']['p95']:.2f}, lesson "
              f"{user['room']['lesson'] / root['room']['lesson']:.2f}")
    if args.against and args.as_user:
        old_user = rows[f"{args.against} ({args.as_user})"]
        user = rows[f"this ({args.as_user})"]
        print(f"\nratios this / {args.against}, both as {args.as_user}: burst p95 "
              f"{user['burst']['p95'] / old_user['burst']['p95']:.2f}, room normal p95 "
              f"{user['room']['p95'] / old_user['room']['p95']:.2f}")
    if args.against:
        this, old = rows[this], rows[args.against]
        print(f"\nratios this / {args.against}: burst p95 "
              f"{this['burst']['p95'] / old['burst']['p95']:.2f}, room normal p95 "
              f"{this['room']['p95'] / old['room']['p95']:.2f}, lesson "
              f"{this['room']['lesson'] / old['room']['lesson']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
