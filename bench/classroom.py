"""A room at once, against real servers on loopback. Three measurements:

1. burst: 30 students press Run on a small script at the same moment: how many runs were
   answered or refused, and p50/p95/max seconds to the answer;
2. loops: 3 of them paste a script that never ends and 27 a small one, while the teacher opens
   a scenario: the same figures for the small runs, and how long the scenario took;
3. follow: 100 students (--followers, e.g. 100,500: each count in turn) follow a class while
   the teacher changes the view every 2 s for 60 s (their streams read over plain sockets by
   four processes, so that the clients take as little of the two cores as they can):
   delivery latency p50/p95/p99 (from the teacher's change to each student's event), errors
   (streams that failed or missed a change), and the server process's memory.

    .venv/bin/python bench/classroom.py [--against REV] [--as-user NAME] [--limit 20]
                                        [--follow-seconds 60] [--early-follow 60]
                                        [--followers 100,500] [--follow-only]

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
import re
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
SCENARIO = "/api/scenarios/reused_layer/trace?k=1"  # a non-default option: not warmed at start


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


CLIENT_PROCESSES = 4  # the followers' streams, read by this many processes
_ID = re.compile(rb"\nid: ?([0-9]+)\r?\n")


def _read_streams(base: str, code: str, cookies: list[str], until: float, out) -> None:
    """A process of its own reading some followers' event streams over plain sockets: each
    event's id and the moment it arrived (CLOCK_MONOTONIC, the same in every process of the
    machine), sent back as [[(version, t), ...] per stream] and a count of streams that failed.
    Plain sockets and a search for `id:` lines: a client this cheap leaves the two cores to
    the server (the whole room is on this machine)."""
    host, port = base.removeprefix("http://").split(":")

    async def one(cookie: str, got: list) -> bool:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write((f"GET /api/classes/{code}/events HTTP/1.1\r\nHost: {host}\r\n"
                          f"Cookie: autograd_lab_client={cookie}\r\n"
                          "Accept: text/event-stream\r\n\r\n").encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                return False
            ready.append(1)
            tail = b""
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(reader.read(65536), until - time.monotonic())
                except TimeoutError:
                    break
                if not data:
                    break
                now = time.monotonic()
                text = tail + data
                got.extend((int(m[1]), now) for m in _ID.finditer(text))
                tail = text[-32:]  # an id line split across two reads is found next time
            writer.close()
            return True
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return False

    ready: list[int] = []

    async def main():
        got = [[] for _ in cookies]
        ok = await asyncio.gather(*(one(c, g) for c, g in zip(cookies, got, strict=True)))
        # an id seen twice (the tail search) counts once, at its first arrival
        return [sorted(dict(reversed(g)).items()) for g in got], ok.count(False)

    out.send(asyncio.run(main()))


async def _follow(base: str, pid: int, followers: int, seconds: float, every: float,
                  others: tuple[str, ...] = ()) -> dict:
    """`followers` event streams on one class (read by CLIENT_PROCESSES processes); the
    teacher changes the view every `every` s. With `others` (web processes of the shared
    mode), the streams are spread over `base` and those; the teacher stays on `base`."""
    bases = (base, *others)
    teacher = httpx.AsyncClient(base_url=base, timeout=10)
    await teacher.get("/")  # the teacher's session cookie
    started = await teacher.post("/api/classes", json={})
    if started.status_code != 201:
        await teacher.aclose()
        return {"skipped": f"no class sessions ({started.status_code})"}
    code = started.json()["code"]
    # a lecture hall behind one network address, as this machine's loopback is: the teacher
    # says so, and every student from it may join (otherwise per_address_people of them)
    await teacher.patch(f"/api/classes/{code}", json={"shared_address": True})
    sent: dict[int, float] = {}  # version -> when the teacher's change was sent
    # each student's browser: the session cookie its first page gives it (the server caps the
    # streams of one browser, and counts followers by person)
    cookies = []
    async with httpx.AsyncClient(base_url=base, timeout=10) as pages:
        for _ in range(followers):
            pages.cookies.clear()  # a new browser: the server gives it a cookie of its own
            page = await pages.get("/")
            cookies.append(page.cookies.get("autograd_lab_client", ""))
    assert len(set(cookies)) == followers and all(cookies), "each student needs its own cookie"

    import multiprocessing

    context = multiprocessing.get_context("fork")
    # a shared classroom joins each student under its row's lock: a class of a thousand
    # takes a while to fill
    connecting = 60 if others else 15
    until = time.monotonic() + connecting + seconds + 3
    readers = []
    for n in range(CLIENT_PROCESSES):
        mine, theirs = context.Pipe(duplex=False)
        share = cookies[n::CLIENT_PROCESSES]
        proc = context.Process(target=_read_streams,
                               args=(bases[n % len(bases)], code, share, until, theirs))
        proc.start()
        readers.append((proc, mine))
    rss_before = _rss_mb(pid)
    deadline = time.monotonic() + connecting  # every stream open, then a second more
    while time.monotonic() < deadline:
        # each web process counts its own followers: the teacher asks each
        counts = [(await teacher.get(f"{b}/api/classes/{code}")).json().get("followers", 0)
                  for b in bases]
        if sum(counts) == followers:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1)
    rss_peak = rss_before
    for n in range(int(seconds / every)):
        t0 = time.monotonic()
        answer = await teacher.put(f"/api/classes/{code}/view",
                                   json={"path": "/scenarios/reused_layer", "query": f"node=n{n}"})
        sent[answer.json()["version"]] = t0
        await asyncio.sleep(every)
        rss_peak = max(rss_peak, _rss_mb(pid))
    got, errors = [], 0
    for proc, pipe in readers:
        streams, failed = await asyncio.to_thread(pipe.recv)
        got.extend(streams)
        errors += failed
        proc.join(10)
    await teacher.delete(f"/api/classes/{code}")
    await teacher.aclose()
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
        code = httpx.get(base + SCENARIO, timeout=limit * 4 + 60).status_code
        out.update(code=code, seconds=time.monotonic() - t0)

    scenario: dict = {}
    threads = [threading.Thread(target=student, args=(i, LOOP if i < 3 else SMALL,
                                                      "loop" if i < 3 else "normal"))
               for i in range(30)]
    threads.append(threading.Thread(target=teacher, args=(scenario,)))
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
            "scenario": scenario.get("seconds", float("nan")),
            "scenario_code": scenario.get("code")}


def _measure(name: str, tree: Path, limit: float, follow_seconds: float,
             early_follow: float = 0.0, uid: int | None = None,
             followers: tuple[int, ...] = (100,), follow_only: bool = False) -> dict:
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
                   QUEUE_SIZE="64", PER_ADDRESS_PEOPLE="200",
                   # every follower's stream is a connection from this one address
                   PER_ADDRESS_CONNECTIONS=str(2 * max(followers) + 64)) as base:
            started = time.monotonic()
            early = asyncio.run(_follow(base, info["pid"], 100, early_follow, 2.0)) \
                if early_follow > 0 else None
            # the pools (and the scenarios, and a fork server) are ready first
            time.sleep(max(0.0, 20 - (time.monotonic() - started)))
            health = httpx.get(base + "/healthz", timeout=10).json()
            burst = room = None
            if not follow_only:
                burst = _burst(base, limit)
                time.sleep(5)
                room = _room(base, limit)
                time.sleep(5)
            follow = {n: asyncio.run(_follow(base, info["pid"], n, follow_seconds, 2.0))
                      if follow_seconds > 0 else {"skipped": "--follow-seconds 0"}
                      for n in followers}
            return {"burst": burst, "room": room, "follow": follow, "early": early,
                    "workers": health.get("workers", {}), "scenarios": health.get("scenarios", {})}


def _print_burst_and_room(rows: dict, limit: float) -> None:
    print("\n30 students press Run on a small script at the same moment (2-core machine, "
          "loopback)\n")
    print("| server | answered | refused | p50 s | p95 s | max s |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        b = r["burst"]
        print(f"| {name} | {b['answered']} | {b['refused']} | {b['p50']:.1f} | {b['p95']:.1f} "
              f"| {b['max']:.1f} |")
    print(f"\n3 looping scripts + 27 small ones at once, wall-clock limit {limit:g} s, "
          f"and a scenario opened during it\n")
    print("| server | answered | refused | normal p50 s | normal p95 s | normal max s | "
          "scenario s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        m = r["room"]
        print(f"| {name} | {m['answered']} | {m['refused']} | {m['p50']:.1f} | {m['p95']:.1f} "
              f"| {m['max']:.1f} | {m['scenario']:.2f} |")


def _shared_follow(followers: int, seconds: float) -> dict:
    """`followers` students split over two web processes of the shared mode (one PostgreSQL
    of its own, Debian's, on loopback), the teacher on the first."""
    from tests.postgres import cluster

    with tempfile.TemporaryDirectory() as store, cluster() as db:
        os.chmod(store, 0o755)
        settings = {"DATABASE_URL": db.url, "WARM_SCENARIOS": "false", "POOL_SIZE": "0",
                    "PER_ADDRESS_PEOPLE": "200",
                    "PER_ADDRESS_CONNECTIONS": str(2 * followers + 64)}
        info: dict = {}
        with serve(Path(store) / "a", name="bench-shared-a", info=info, **settings) as a, \
                serve(Path(store) / "b", name="bench-shared-b", **settings) as b:
            return asyncio.run(_follow(a, info["pid"], followers, seconds, 2.0, others=(b,)))


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
    parser.add_argument("--followers", default="100",
                        help="how many students follow, e.g. 100,500 (each measured in turn)")
    parser.add_argument("--follow-only", action="store_true",
                        help="measure only the following (not the burst and the room)")
    parser.add_argument("--shared-followers", type=int, default=0, metavar="N",
                        help="also N students split over two web processes of the shared "
                        "mode (AUTOGRAD_LAB_DATABASE_URL, a PostgreSQL of its own)")
    args = parser.parse_args()
    followers = tuple(int(n) for n in args.followers.split(","))
    measure = functools.partial(_measure, followers=followers, follow_only=args.follow_only)
    if args.as_user and os.geteuid() != 0:
        parser.error("--as-user needs root (the server is started as root, then as NAME)")
    this = "this (root)" if args.as_user and os.geteuid() == 0 else "this"
    rows = {this: measure("this", ROOT, args.limit, args.follow_seconds, args.early_follow)}
    if args.as_user:
        rows[f"this ({args.as_user})"] = measure(
            f"as-{args.as_user}", ROOT, args.limit, args.follow_seconds, args.early_follow,
            uid=pwd.getpwnam(args.as_user).pw_uid)
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            tree = _archive(args.against, Path(tmp))
            os.chmod(tmp, 0o755)  # the other user reads the tree too
            rows[args.against] = measure("previous", tree, args.limit, args.follow_seconds,
                                          args.early_follow)
            if args.as_user:
                rows[f"{args.against} ({args.as_user})"] = measure(
                    f"previous-as-{args.as_user}", tree, args.limit, args.follow_seconds,
                    args.early_follow, uid=pwd.getpwnam(args.as_user).pw_uid)
    print("\nHow each server starts its workers (its /healthz, 20 s after start)\n")
    print("| server | forked | uploads at once | scenarios warm after s |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        w, scenarios = r["workers"], r["scenarios"]
        print(f"| {name} | {w.get('forked', '?')} | {w.get('uploads_at_once', '?')} | "
              f"{scenarios.get('warmed_in_s', '?')} |")
    if not args.follow_only:
        _print_burst_and_room(rows, args.limit)
    for n in followers:
        print(f"\n{n} students follow a class; the teacher changes the view every 2 s for "
              f"{args.follow_seconds:g} s (their streams read by {CLIENT_PROCESSES} processes "
              "on this machine)\n")
        print("| server | changes | delivered p50 ms | p95 ms | p99 ms | max ms | errors | "
              "missed | server RSS MB before → peak |")
        print("|---|---|---|---|---|---|---|---|---|")
        for name, r in rows.items():
            f = r["follow"][n]
            if "skipped" in f:
                print(f"| {name} | {f['skipped']} |  |  |  |  |  |  |  |")
                continue
            print(f"| {name} | {f['changes']} | {f['p50'] * 1000:.0f} | {f['p95'] * 1000:.0f} "
                  f"| {f['p99'] * 1000:.0f} | {f['max'] * 1000:.0f} | {f['errors']} | "
                  f"{f['missed']} | {f['rss_before']:.0f} → {f['rss_peak']:.0f} |")
    if args.early_follow:
        print(f"\nThe same class from the server's first answer, for {args.early_follow:g} s "
              "(while it starts and warms the scenarios), against later\n")
        print("| server | delivered p50 ms early | p95 ms early | p95 ms later | errors early |")
        print("|---|---|---|---|---|")
        for name, r in rows.items():
            e, f = r["early"], r["follow"][followers[0]]
            later = f"{f['p95'] * 1000:.0f}" if "p95" in f else "-"
            print(f"| {name} | {e['p50'] * 1000:.0f} | {e['p95'] * 1000:.0f} | {later} | "
                  f"{e['errors']} |")
    if args.shared_followers:
        f = _shared_follow(args.shared_followers, args.follow_seconds)
        print(f"\n{args.shared_followers} students follow a class split over two web processes "
              "of the shared mode (one PostgreSQL), the teacher on the first; the view "
              f"changes every 2 s for {args.follow_seconds:g} s\n")
        print("| changes | delivered p50 ms | p95 ms | p99 ms | max ms | errors | missed | "
              "first web process's RSS MB before → peak |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {f['changes']} | {f['p50'] * 1000:.0f} | {f['p95'] * 1000:.0f} | "
              f"{f['p99'] * 1000:.0f} | {f['max'] * 1000:.0f} | {f['errors']} | {f['missed']} "
              f"| {f['rss_before']:.0f} → {f['rss_peak']:.0f} |")
    if args.follow_only:
        return 0
    if args.as_user:
        root, user = rows[this], rows[f"this ({args.as_user})"]
        print(f"\nratios {args.as_user} / root: burst p95 "
              f"{user['burst']['p95'] / root['burst']['p95']:.2f}, room normal p95 "
              f"{user['room']['p95'] / root['room']['p95']:.2f}, scenario "
              f"{user['room']['scenario'] / root['room']['scenario']:.2f}")
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
              f"{this['room']['p95'] / old['room']['p95']:.2f}, scenario "
              f"{this['room']['scenario'] / old['room']['scenario']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
