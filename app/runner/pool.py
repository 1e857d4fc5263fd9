"""Pre-started, already-sandboxed workers, so that a small script answers in about a second.

A worker spends ~2 s importing torch; a pooled one has done that (and applied its Landlock
ruleset) before the job exists, and waits for the job on its stdin. Each worker runs exactly
one job and is then thrown away with its folder and its uid; a filler thread starts its
replacement at once.

    pool = Pool(size=2).start()                # at web start-up
    doc = trace_in_sandbox(source=..., pool=pool)   # sandboxed_trace.py: pooled or fresh
    child = pool.acquire(timeout=1.0)          # or take a worker yourself (None if none ready)
    pool.stop()                                # at shutdown: idle workers are killed

Bounding concurrency is the caller's business (a semaphore of `cores`); `acquire(timeout)`
lets it wait a little for a warm worker. The pool only hands out workers: it does not know
what runs in them. Torch-free.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from . import sandbox
from .child import START_TIMEOUT, Child
from .fork_server import ForkServer
from .sandbox import cgroups, identity
from .start_failures import START_FAILURES, StartFailures

__all__ = ["Pool"]

log = logging.getLogger("autograd_lab.runner.pool")


class Pool:
    def __init__(self, size: int = 2, policy: sandbox.Policy | None = None,
                 start_timeout: float = START_TIMEOUT,
                 fork_server: ForkServer | None = None,
                 start_failures: StartFailures = START_FAILURES) -> None:
        if size < 1:
            raise ValueError("a pool needs at least one worker")
        self.size = size
        self.policy = policy or sandbox.Policy()
        self.start_timeout = start_timeout
        self.fork_server = fork_server  # when ready, workers are forked from it (fork_server.py)
        self._ready: queue.Queue[Child] = queue.Queue()
        self._room = threading.Semaphore(size)  # one permit per worker not yet started
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.start_failures = start_failures  # where each failed start is counted
        self.failures = 0  # workers that did not become ready (the last reason in last_error)
        self.last_error = ""
        self.served = 0  # workers handed out

    @property
    def running(self) -> bool:
        return bool(self._threads) and not self._stopped.is_set()

    def start(self) -> Pool:
        layers = sandbox.effective(self.policy)
        if layers["cgroups"]:
            swept = cgroups.sweep()
            if swept:
                log.warning("sandbox pool: removed the cgroups of a previous server's runs: %s",
                            swept)
        if layers["uid"]:
            swept = identity.sweep_orphans()
            if swept:
                log.warning("sandbox pool: killed processes left by a previous server under "
                            "uids %s", swept)
        off = [name for name, on in layers.items() if not on]
        log.info("sandbox pool of %d workers; layers on: %s%s", self.size,
                 ", ".join(n for n, on in layers.items() if on) or "none",
                 f"; off: {', '.join(off)}" if off else "")
        for i in range(self.size):
            t = threading.Thread(target=self._fill, name=f"autograd-lab-pool-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stopped.set()
        for _ in self._threads:
            self._room.release()  # wake fillers blocked on a full pool
        for t in self._threads:
            t.join(timeout=30)
        self._threads.clear()
        while True:
            try:
                self._ready.get_nowait().discard()
            except queue.Empty:
                break

    def __enter__(self) -> Pool:
        return self.start() if not self._threads else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _fill(self) -> None:
        if self.fork_server is not None and self.fork_server.started():
            # fork the first workers too: exec'd ones would each import torch meanwhile
            self.fork_server.settle(cancel=self._stopped)
        backoff = 1.0
        while True:
            self._room.acquire()
            if self._stopped.is_set():
                return
            try:
                child = Child.spawn(self.policy, fork_server=self.fork_server)
            except Exception as exc:  # noqa: BLE001 - report, wait, try again
                child, reason = None, f"could not start a worker: {exc}"
            else:
                reason = ""
                if not child.wait_ready(self.start_timeout, cancel=self._stopped):
                    if self._stopped.is_set():
                        child.discard()
                        return
                    reason = "a worker did not become ready: " + child.log_tail()[-2000:]
                    child.discard()
                    child = None
            if child is None:
                self.failures += 1
                self.last_error = reason
                self.start_failures.record("pool", reason)
                log.warning("sandbox pool: %s", reason)
                self._room.release()
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            backoff = 1.0
            self.start_failures.started()
            if self._stopped.is_set():
                child.discard()
                return
            self._ready.put(child)

    def idle(self) -> int:
        """Workers ready right now."""
        return self._ready.qsize()

    def acquire(self, timeout: float | None = None,
                cancel: threading.Event | None = None) -> Child | None:
        """A ready worker (yours to run one job on, then it is gone), or None after `timeout`
        or as soon as `cancel` is set (its run was stopped meanwhile). Its replacement starts at
        once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if cancel is not None and cancel.is_set():
                return None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if cancel is not None:  # looked at again every tenth of a second
                remaining = 0.1 if remaining is None else min(remaining, 0.1)
            try:
                child = self._ready.get(timeout=remaining)
            except queue.Empty:
                if cancel is not None and (deadline is None or time.monotonic() < deadline):
                    continue
                return None
            self._room.release()
            if child.alive():
                self.served += 1
                return child
            log.warning("sandbox pool: an idle worker had died: %s", child.log_tail()[-500:])
            child.discard()
