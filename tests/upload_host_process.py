"""`autograd-lab upload-host` as a real process for tests: started with the shared line's database,
its output in test-artifacts/NAME.log, and waited for until it says it is alive in the line
(its row in `upload_hosts`); stopped (its whole process group) afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.server import ARTIFACTS, ROOT

__all__ = ["upload_host", "alive_hosts", "queue_result"]


def queue_result(queue, run_id: str, timeout: float = 120) -> dict:
    """A `RunQueue`'s `result`, awaited on an event loop of its own thread: the caller's
    thread may already have a running loop (Playwright's sync API leaves one behind after the
    browser tests), and asyncio.run refuses to start inside it."""
    import asyncio
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run,
                           asyncio.wait_for(queue.result(run_id), timeout)).result()


def alive_hosts(database: str) -> list[str]:
    import psycopg

    with psycopg.connect(database, connect_timeout=5) as db:
        try:
            return [r[0] for r in db.execute(
                "SELECT name FROM upload_hosts WHERE seen > now() - interval '30 seconds'")]
        except psycopg.errors.UndefinedTable:
            return []


@contextmanager
def upload_host(database: str, folder: Path, name: str, start_timeout: float = 60,
                  cpus: str | None = None, wrap=None, **settings: str
                  ) -> Iterator[subprocess.Popen]:
    """`cpus`: the cores it and everything it starts may use (taskset's list, "0" or "0,1"):
    bench/scale_out.py pins each upload host to a core of its own."""
    log = ARTIFACTS / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AUTOGRAD_LAB_DATABASE_URL": database,
           "AUTOGRAD_LAB_STORE_PATH": str(folder / "unused.sqlite3"),
           "AUTOGRAD_LAB_POOL_SIZE": "0", "AUTOGRAD_LAB_SELFTEST": "false",
           **{f"AUTOGRAD_LAB_{k.upper()}": str(v) for k, v in settings.items()}}
    with log.open("wb") as out:
        command = [sys.executable, "-m", "app.cli", "upload-host", "--name", name]
        if cpus is not None:
            command = ["taskset", "-c", cpus, *command]
        if wrap is not None:  # tests/unprivileged.py: as another user
            command = wrap(command)
        proc = subprocess.Popen(command,
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while name not in alive_hosts(database):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the upload host did not start; see {log}:\n"
                                   + log.read_text()[-3000:])
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
