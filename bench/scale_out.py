"""Past one machine, measured on one: the shared line (PostgreSQL + Procrastinate,
`autograd-lab upload-host`) with one upload host and with two, each pinned to a core of its own,
and the line's added latency per run against the embedded default (the in-process queue).
Prints tables; not a timed test. Everything runs on loopback: a PostgreSQL cluster of its own
(Debian's, as the tests start it), the upload hosts, and the runs' senders in this process.

    .venv/bin/python bench/scale_out.py [--runs 60] [--rounds 5] [--latency-runs 10] [--slots 3]

1. throughput: --runs scripts, each from a person of its own, all sent at once (from 8
   threads): a small one (a linear layer's forward and backward), then a short training
   script (30 steps of a small MLP); the time from the first send to the last Trace stored,
   with one upload host (pinned to core 0; the second paused) and with two (cores 0 and 1), each
   with --slots runs at once; --rounds batches each, one upload host's and two's in turn to the
   same warm upload hosts, and their medians shown (a batch of 60 small runs lasts a second or
   two, and this machine's speed drifts). The ratio is two upload hosts' runs per second over
   one's.
2. latency: --latency-runs of the small script one after the other (nothing else running),
   from the send to the stored Trace in hand: the in-process queue (the upload lane of a
   TraceService in this process, with its fork server, as `autograd-lab serve` runs it) and
   the shared line with one upload host; the difference is what the line adds per run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.web.runs.in_process_queue import InProcessQueue  # noqa: E402
from app.web.runs.queue import Submission  # noqa: E402
from tests.postgres import cluster, fresh_database  # noqa: E402
from tests.server import ARTIFACTS  # noqa: E402
from tests.upload_host_process import queue_result, upload_host  # noqa: E402

SMALL = ("import torch\ntorch.manual_seed(0)\nlayer = torch.nn.Linear(3, 2)\n"
         "loss = layer(torch.randn(4, 3)).pow(2).sum()\nloss.backward()\n")
# a short training script: 30 steps of a small MLP (a tenth of a second of CPU or so, traced)
TRAINING = ("import torch\ntorch.manual_seed(0)\n"
            "model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), "
            "torch.nn.Linear(128, 10))\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))\n"
            "for _ in range(30):\n    opt.zero_grad()\n"
            "    torch.nn.functional.cross_entropy(model(x), y).backward()\n    opt.step()\n")
SCRIPTS = {"linear layer": SMALL, "MLP training": TRAINING}
LIMIT = 60.0
SENDERS = 8  # threads sending at once, as a web process's request threads would


def _shared(database: str, queue_size: int):
    from app.web.runs.shared_queue import SharedQueue
    from app.web.store.postgres import PostgresRunStore

    store = PostgresRunStore(database, pool_size=8).open()
    return store, SharedQueue(store, running=1, queued=1, queue_size=queue_size,
                              people_per_address=1000)


def _machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (every process: upload hosts, runs, PostgreSQL,
    this one), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(f) for f in fields]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _database_writes(database: str) -> tuple[int, int]:
    """(transactions committed, rows inserted + updated + deleted) in `database` so far."""
    import psycopg

    time.sleep(1.5)  # each backend flushes its counts at most once a second
    with psycopg.connect(database, autocommit=True) as db:
        row = db.execute("SELECT xact_commit, tup_inserted + tup_updated + tup_deleted FROM "
                         "pg_stat_database WHERE datname = current_database()").fetchone()
    return int(row[0]), int(row[1])


def _open_runs(store) -> int:
    with store.database.transaction() as db:
        return db.execute("SELECT COUNT(*) FROM uploads WHERE state IN ('queued', 'running')"
                          ).fetchone()[0]


FACTS: dict[str, float] = {}  # per small run, from the first one-host batch
CPU_PER_RUN: dict[str, float] = {}  # the machine's CPU seconds per run, each script, the same


def throughput(url: str, runs: int, slots: int, folder: Path, rounds: int,
               script: str = SMALL) -> tuple[list[float], list[float]]:
    """Seconds from the first send to the last stored Trace, with one upload host and with two,
    for each of `rounds` pairs of batches. Two upload hosts are started (pinned to cores 0 and 1)
    and warmed once; for a one-host batch the second is paused (SIGSTOP: it takes no job
    and spends no CPU), and the two kinds of batch alternate: this machine's speed drifts by
    a fifth over minutes (its host's other guests), which batches measured minutes apart
    would take for a difference between one upload host and two."""
    database = fresh_database(url)
    store, queue = _shared(database, queue_size=runs)
    from contextlib import ExitStack

    one, two = [], []
    with ExitStack() as stack:
        first, second = (stack.enter_context(upload_host(
            database, folder, f"bench/scale-upload-host-{n}", cpus=str(n),
            UPLOAD_WORKERS=str(slots), UPLOAD_TIMEOUT=str(LIMIT))) for n in range(2))
        for other in (second, first):
            with _paused(other, store):  # each one's fork server has served runs, once
                _warm(queue, slots)
        for batch in range(rounds):
            # which goes first alternates too
            for alone in ((True, False) if batch % 2 == 0 else (False, True)):
                if not alone:
                    two.append(_batch(queue, store, f"round{batch}-two", runs, script))
                    continue
                with _paused(second, store):
                    if batch == 0:
                        commits, rows = _database_writes(database)
                        cpu = _machine_cpu_s()
                    one.append(_batch(queue, store, f"round{batch}-one", runs, script))
                    if batch == 0:
                        CPU_PER_RUN[script] = (_machine_cpu_s() - cpu) / runs
                        commits_after, rows_after = _database_writes(database)
                        if script == SMALL:
                            FACTS.update(commits=(commits_after - commits) / runs,
                                         rows=(rows_after - rows) / runs)
    queue.close()
    store.close()
    return one, two


@contextmanager
def _paused(host, store):
    """`host` stopped (SIGSTOP to its process group) once the line has no job left (its
    last job's end recorded: a job held while stopped would be seen as a dead upload host's), and
    continued afterwards. Its fork server, idle, is left as it is."""
    while True:
        with store.database.transaction() as db:
            if not db.execute("SELECT COUNT(*) FROM procrastinate_jobs").fetchone()[0]:
                break
        time.sleep(0.02)
    os.killpg(host.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(host.pid, signal.SIGCONT)


def _batch(queue, store, name: str, runs: int, script: str) -> float:
    """One batch: `runs` scripts sent at once, each from a person of its own; the seconds from
    the first send to the end of the last run, as the database's clock says (this machine's:
    no polling interval in the figure)."""
    started = time.time()
    # sent as a room sends them: many at once (a web process books each in a thread)
    with concurrent.futures.ThreadPoolExecutor(SENDERS) as senders:
        ids = list(senders.map(lambda i: queue.submit(
            Submission(f"{name}-person-{i}", "script.py", script, "cpu", LIMIT)), range(runs)))
    while _open_runs(store):  # one small question, not a status per run: the sender's
        time.sleep(0.05)       # load on PostgreSQL is not the line's
    failed = [i for i in ids if (store.get(i) or {}).get("error")]
    if failed:
        raise SystemExit(f"{len(failed)} runs failed, e.g. {store.get(failed[0])['error']}")
    with store.database.transaction() as db:
        ended = db.execute("SELECT extract(epoch FROM max(ended)) FROM uploads "
                           "WHERE id = ANY(%s)", (ids,)).fetchone()[0]
    return float(ended) - started


def _warm(queue, count: int) -> None:
    """One run per slot first: each upload host's fork server has torch loaded before the clock."""
    ids = [queue.submit(Submission(f"warm-{i}", "warm.py", SMALL, "cpu", LIMIT))
           for i in range(count)]
    for run_id in ids:
        queue_result(queue, run_id, 300)


def runs_alone(runs: int, slots: int, rounds: int, script: str) -> tuple[list[float], list[float]]:
    """The machine's own ceiling, with no line at all: the same runs through the same sandbox
    (an upload lane with its fork server, `slots` at once) in a process pinned to core 0, and
    in two pinned to cores 0 and 1 with half the runs each; the second paused for the first
    kind, the two kinds taken in turn, as the line's are. What two cores give these runs
    without PostgreSQL, Procrastinate or a sender beside them."""
    logs = [ARTIFACTS / f"bench/alone-{n}.log" for n in range(2)]
    logs[0].parent.mkdir(parents=True, exist_ok=True)
    lanes = []
    for n, log in enumerate(logs):
        with log.open("w") as err:
            lanes.append(subprocess.Popen(
                ["taskset", "-c", str(n), sys.executable, __file__, "--alone", str(slots)],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                text=True, start_new_session=True))

    def answer(lane) -> None:
        said = lane.stdout.readline().strip()
        if said not in ("ready", "done"):
            raise SystemExit(f"a lane of the runs-alone measurement stopped; see {logs}")

    try:
        for lane in lanes:
            answer(lane)

        def batch(used: list, each: int) -> float:
            started = time.perf_counter()
            for lane in used:
                lane.stdin.write(f"{each} {script == SMALL}\n")
                lane.stdin.flush()
            for lane in used:
                answer(lane)
            return time.perf_counter() - started

        one, two = [], []
        for n in range(rounds):
            for alone in ((True, False) if n % 2 == 0 else (False, True)):
                if alone:
                    os.killpg(lanes[1].pid, signal.SIGSTOP)
                    try:
                        one.append(batch(lanes[:1], runs))
                    finally:
                        os.killpg(lanes[1].pid, signal.SIGCONT)
                else:
                    two.append(batch(lanes, runs // 2))
        return one, two
    finally:
        for lane in lanes:
            lane.stdin.close()
            try:
                lane.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(lane.pid, signal.SIGKILL)


def _alone(slots: int) -> None:
    """`--alone SLOTS`: a lane of runs with no line (runs_alone): warm, say ready, then for
    each line "COUNT SMALL?" on stdin run that many at once `slots` at a time and answer."""
    from app.web.runs.trace_service import TraceService
    from app.web.settings import Settings

    traces = TraceService(Settings(upload_workers=slots, queue_size=1000, pool_size=0,
                                   warm_scenarios=False, selftest=False, upload_timeout=LIMIT))
    traces.start(scenarios=False)
    lane = traces.uploads

    def one(script: str) -> None:
        with lane.gate.enter():
            doc = lane.run(script, "script.py", [], "cpu")
        if doc.get("error"):
            raise SystemExit(f"a run failed: {doc['error']}")

    with concurrent.futures.ThreadPoolExecutor(slots) as pool:
        list(pool.map(one, [SMALL] * slots * 2))
        print("ready", flush=True)
        for line in sys.stdin:
            count, small = line.split()
            list(pool.map(one, [SMALL if small == "True" else TRAINING] * int(count)))
            print("done", flush=True)
    traces.stop()


def latency_shared(url: str, n: int, folder: Path) -> list[float]:
    database = fresh_database(url)
    store, queue = _shared(database, queue_size=4)
    with upload_host(database, folder, "bench/latency-upload-host", cpus="0", UPLOAD_WORKERS="1",
                       UPLOAD_TIMEOUT=str(LIMIT)):
        _warm(queue, 1)
        times = _one_after_another(queue, n)
    queue.close()
    store.close()
    return times


def latency_in_process(n: int, folder: Path) -> list[float]:
    from app.web.runs.trace_service import TraceService
    from app.web.settings import Settings
    from app.web.store.sqlite import RunStore

    settings = Settings(upload_workers=1, queue_size=4, pool_size=1, warm_scenarios=False,
                        selftest=False, upload_timeout=LIMIT)
    traces = TraceService(settings)
    traces.start(scenarios=False)
    try:
        queue = InProcessQueue(traces.uploads, RunStore(folder / "runs.sqlite3").open(), 1, 1)
        _warm(queue, 1)
        return _one_after_another(queue, n)
    finally:
        traces.stop()


def _one_after_another(queue, n: int) -> list[float]:
    times = []
    for i in range(n):
        started = time.perf_counter()
        run_id = queue.submit(Submission(f"person-{i}", "small.py", SMALL, "cpu", LIMIT))
        doc = queue_result(queue, run_id, 300)
        times.append(time.perf_counter() - started)
        if doc.get("error"):
            raise SystemExit(f"a run failed: {doc['error']}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--latency-runs", type=int, default=10)
    parser.add_argument("--slots", type=int, default=3, help="runs at once per upload host")
    parser.add_argument("--rounds", type=int, default=5,
                        help="batches per measurement; the median is shown")
    parser.add_argument("--alone", type=int, help=argparse.SUPPRESS)  # runs_alone's lanes
    args = parser.parse_args()
    if args.alone:
        _alone(args.alone)
        return 0
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("two upload hosts pinned to two cores need a machine with two")
    with tempfile.TemporaryDirectory() as tmp, cluster() as db:
        folder = Path(tmp)
        measured = {name: throughput(db.url, args.runs, args.slots, folder, args.rounds, script)
                    for name, script in SCRIPTS.items()}
        ceiling = {name: runs_alone(args.runs, args.slots, args.rounds, script)
                   for name, script in SCRIPTS.items()}
        embedded = latency_in_process(args.latency_runs, folder)
        shared = latency_shared(db.url, args.latency_runs, folder)

    print(f"\n{args.runs} runs sent at once, {args.slots} slots per upload host, each pinned "
          f"to a core of its own; the median of {args.rounds} batches each, one upload host's "
          "and two's taken in turn:\n")
    print("| script | CPU per run (s) | upload hosts | seconds (median) | fastest – slowest | "
          "runs per second | ratio to one upload host | ratio, each round's pair |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (one, two) in measured.items():
        # each round's two batches ran back to back: their ratio is least moved by the drift
        pairs = sorted(a / b for a, b in zip(one, two, strict=True))
        for hosts, times in ((1, one), (2, two)):
            took = statistics.median(times)
            paired = "" if hosts == 1 else \
                f"{statistics.median(pairs):.2f}× ({pairs[0]:.2f} – {pairs[-1]:.2f})"
            print(f"| {name} | {CPU_PER_RUN[SCRIPTS[name]]:.3f} | {hosts} | {took:.2f} | "
                  f"{min(times):.2f} – {max(times):.2f} | {args.runs / took:.1f} | "
                  f"{statistics.median(one) / took:.2f}× | {paired} |")
    print("\nCPU per run: the whole machine's (upload host, runs, PostgreSQL, sender), one "
          "upload host. "
          f"A small run: PostgreSQL {FACTS['commits']:.1f} transactions committed, "
          f"{FACTS['rows']:.1f} rows written (the sender's question every 50 ms, how many "
          "runs are open, included)")
    print("\nThe machine's own ceiling: the same runs with no line (an upload lane with its "
          "fork server in a process pinned to core 0, and in two pinned to 0 and 1 with half "
          "the runs each; in turn, medians):\n")
    print("| script | one process (s) | two (s) | ratio, runs alone | ratio, the shared line | "
          "the line's of the ceiling |")
    print("|---|---|---|---|---|---|")
    for name, (one, two) in ceiling.items():
        alone = statistics.median(one) / statistics.median(two)
        line = statistics.median(measured[name][0]) / statistics.median(measured[name][1])
        print(f"| {name} | {statistics.median(one):.2f} | {statistics.median(two):.2f} | "
              f"{alone:.2f}× | {line:.2f}× | {line / alone:.0%} |")
    e, s = statistics.median(embedded), statistics.median(shared)
    print(f"\n{args.latency_runs} runs one after the other, send to stored Trace in hand "
          "(median, and p90):\n")
    print("| queue | median (s) | p90 (s) |")
    print("|---|---|---|")
    for name, times in (("in-process (embedded default)", embedded),
                        ("shared line, one upload host", shared)):
        p90 = sorted(times)[max(0, int(len(times) * 0.9) - 1)]
        print(f"| {name} | {statistics.median(times):.3f} | {p90:.3f} |")
    print(f"\nadded by the shared line per run: {s - e:+.3f} s (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
