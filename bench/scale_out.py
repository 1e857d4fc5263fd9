"""Past one machine, measured on one: the shared line (PostgreSQL + Procrastinate,
`autograd-lab worker`) with one worker process and with two, each pinned to a core of its own,
and the line's added latency per run against the embedded default (the in-process queue).
Prints tables; not a timed test. Everything runs on loopback: a PostgreSQL cluster of its own
(Debian's, as the tests start it), the workers, and the runs' senders in this process.

    .venv/bin/python bench/scale_out.py [--runs 60] [--rounds 5] [--latency-runs 10] [--slots 3]

1. throughput: --runs scripts, each from a person of its own, all sent at once (from 8
   threads): a small one (a linear layer's forward and backward), then a short training
   script (30 steps of a small MLP); the time from the first send to the last Trace stored,
   with one worker (pinned to core 0) and with two (cores 0 and 1), each with --slots runs at
   once; --rounds batches each, one after another to the same warm workers, and their
   median shown (a batch of 60 small runs lasts a second or two: one batch alone varies by a
   tenth). The ratio is two workers' runs per second over one's.
2. latency: --latency-runs of the small script one after the other (nothing else running),
   from the send to the stored Trace in hand: the in-process queue (the upload lane of a
   TraceService in this process, with its fork server, as `autograd-lab serve` runs it) and
   the shared line with one worker; the difference is what the line adds per run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.web.run_queue import InProcessQueue, Submission  # noqa: E402
from tests.postgres import cluster, fresh_database  # noqa: E402
from tests.worker_process import queue_result, upload_worker  # noqa: E402

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
SCRIPTS = {"small": SMALL, "training": TRAINING}
LIMIT = 60.0
SENDERS = 8  # threads sending at once, as a web process's request threads would


def _shared(database: str, queue_size: int):
    from app.web.pg_store import PostgresRunStore
    from app.web.shared_queue import SharedQueue

    store = PostgresRunStore(database, pool_size=8).open()
    return store, SharedQueue(store, running=1, queued=1, queue_size=queue_size,
                              people_per_address=1000)


def _machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (every process: workers, runs, PostgreSQL,
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
    with store._connect() as db:
        return db.execute("SELECT COUNT(*) FROM uploads WHERE state IN ('queued', 'running')"
                          ).fetchone()[0]


FACTS: dict[str, float] = {}  # per run, from the one-worker throughput run


def throughput(url: str, workers: int, runs: int, slots: int, folder: Path, rounds: int,
               script: str = SMALL) -> list[float]:
    """Seconds from the first send to the last stored Trace, with `workers` pinned workers,
    for each of `rounds` batches sent one after another to the same warm workers."""
    database = fresh_database(url)
    store, queue = _shared(database, queue_size=runs)
    from contextlib import ExitStack

    times = []
    with ExitStack() as stack:
        for n in range(workers):
            stack.enter_context(upload_worker(database, folder, f"bench/scale-worker-{n}",
                                              cpus=str(n), UPLOAD_WORKERS=str(slots),
                                              UPLOAD_TIMEOUT=str(LIMIT)))
        _warm(queue, slots * workers)
        for batch in range(rounds):
            commits, rows = _database_writes(database)
            cpu = _machine_cpu_s()
            times.append(_batch(queue, store, f"round{batch}", runs, script))
            cpu = _machine_cpu_s() - cpu
            if workers == 1 and script == SMALL and batch == 0:
                commits_after, rows_after = _database_writes(database)
                FACTS.update(cpu_s=cpu / runs, commits=(commits_after - commits) / runs,
                             rows=(rows_after - rows) / runs)
    queue.close()
    store.close()
    return times


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
    with store._connect() as db:
        ended = db.execute("SELECT extract(epoch FROM max(ended)) FROM uploads "
                           "WHERE id = ANY(%s)", (ids,)).fetchone()[0]
    return float(ended) - started


def _warm(queue, count: int) -> None:
    """One run per slot first: each worker's fork server has torch loaded before the clock."""
    ids = [queue.submit(Submission(f"warm-{i}", "warm.py", SMALL, "cpu", LIMIT))
           for i in range(count)]
    for run_id in ids:
        queue_result(queue, run_id, 300)


def latency_shared(url: str, n: int, folder: Path) -> list[float]:
    database = fresh_database(url)
    store, queue = _shared(database, queue_size=4)
    with upload_worker(database, folder, "bench/latency-worker", cpus="0", UPLOAD_WORKERS="1",
                       UPLOAD_TIMEOUT=str(LIMIT)):
        _warm(queue, 1)
        times = _one_after_another(queue, n)
    queue.close()
    store.close()
    return times


def latency_in_process(n: int, folder: Path) -> list[float]:
    from app.web.settings import Settings
    from app.web.store import RunStore
    from app.web.traces import TraceService

    settings = Settings(upload_workers=1, queue_size=4, pool_size=1, warm_lessons=False,
                        selftest=False, upload_timeout=LIMIT)
    traces = TraceService(settings)
    traces.start(lessons=False)
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
    parser.add_argument("--slots", type=int, default=3, help="runs at once per worker")
    parser.add_argument("--rounds", type=int, default=5,
                        help="batches per measurement; the median is shown")
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("two workers pinned to two cores need a machine with two")
    with tempfile.TemporaryDirectory() as tmp, cluster() as db:
        folder = Path(tmp)
        measured = {name: (throughput(db.url, 1, args.runs, args.slots, folder, args.rounds,
                                      script),
                           throughput(db.url, 2, args.runs, args.slots, folder, args.rounds,
                                      script))
                    for name, script in SCRIPTS.items()}
        embedded = latency_in_process(args.latency_runs, folder)
        shared = latency_shared(db.url, args.latency_runs, folder)

    print(f"\n{args.runs} runs sent at once, {args.slots} slots per worker, each worker "
          f"pinned to a core of its own; the median of {args.rounds} batches:\n")
    print("| script | workers | seconds (median) | fastest – slowest | runs per second | "
          "ratio to one worker |")
    print("|---|---|---|---|---|---|")
    for name, (one, two) in measured.items():
        for workers, times in ((1, one), (2, two)):
            took = statistics.median(times)
            print(f"| {name} | {workers} | {took:.2f} | {min(times):.2f} – {max(times):.2f} | "
                  f"{args.runs / took:.1f} | {statistics.median(one) / took:.2f}× |")
    print(f"\nper run, one worker: {FACTS['cpu_s']:.3f} s of the machine's CPU (every process: "
          f"worker, run, PostgreSQL, sender); PostgreSQL: {FACTS['commits']:.1f} transactions "
          f"committed, {FACTS['rows']:.1f} rows written (the sender's question every 50 ms, "
          "how many runs are open, included in the transactions)")
    e, s = statistics.median(embedded), statistics.median(shared)
    print(f"\n{args.latency_runs} runs one after the other, send to stored Trace in hand "
          "(median, and p90):\n")
    print("| queue | median (s) | p90 (s) |")
    print("|---|---|---|")
    for name, times in (("in-process (embedded default)", embedded),
                        ("shared line, one worker", shared)):
        p90 = sorted(times)[max(0, int(len(times) * 0.9) - 1)]
        print(f"| {name} | {statistics.median(times):.3f} | {p90:.3f} |")
    print(f"\nadded by the shared line per run: {s - e:+.3f} s (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
