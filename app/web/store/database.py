"""The one owner of the shared mode's PostgreSQL database (`AUTOGRAD_LAB_DATABASE_URL`): its
connection pool, every table the app keeps there, the advisory-lock keys its processes agree
on, and the schema's version. The run store (postgres.py), the shared line (runs/shared_queue.py,
runs/upload_host.py) and the shared classes (classes/shared.py) each ask it for a transaction
and write their own statements in it; none of them connects, creates a table or picks a lock
key of its own.

The schema is made in numbered steps (`STEPS`), recorded in `autograd_lab_schema`, one row per
step applied. `open()` applies the steps the database lacks, under the schema lock, in one
transaction: every web process and upload host that starts at once agrees, and each step is applied
once. Step 1 is the tables as the releases before the version table made them, written with
IF NOT EXISTS: a database one of those made is adopted as version 1 as it is. A later change
is a new step appended to `STEPS`, never an edit of one already released; a step is additive
(a column, a table, an index), so a process of the release before it keeps working beside it
while a course's processes are restarted one by one.

Procrastinate's tables (the shared line's jobs) are its own, made from the installed
Procrastinate's schema when they are missing (`procrastinate_schema`): here too, so that every
table of this database is made in this module, under the same lock."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum

from .common import StoreUnavailable
from .outage import Outage

__all__ = ["Database", "Lock", "STEPS", "lock", "redacted"]

log = logging.getLogger(__name__)

STATEMENT_MS = 15_000  # the longest statement: a 16 MiB Trace's upsert, with room to spare
LOCK_MS = 5_000  # the longest wait for a row's lock (a class's, a run's)
# how long the pool keeps trying to make again a connection it lost, backing off (1, 2, 4 s...)
# before it gives up on it (and makes one again when asked): psycopg_pool's own default, five
# minutes, let the back-off reach a minute and more, and a web process came back 97 s after
# the database did (issue 39). The outage's probe (outage.py) says when the database is back.
RECONNECT_S = 10.0
CONNECT_S = 5  # libpq's connect_timeout: a database host that drops packets is given up soon
DOWN = ("the server's database cannot be reached just now (it is being restarted, or is "
        "down): try again in a few seconds")


class Lock(IntEnum):
    """The keys of the transaction-level advisory locks (`lock`) every process of a course
    takes: the same numbers as the releases before this module, so processes of both agree
    while a course is restarted one by one.

    One SCHEMA lock is enough now that every table is made here, in one transaction: the
    releases before took one per module that made tables (0x6167_6C61_6204 the line's,
    0x6167_6C61_6205 the classes'); those two keys are retired, never to be given to anything
    else."""

    SCHEMA = 0x6167_6C61_6201  # two processes starting at once would race on CREATE TABLE
    PRUNE = 0x6167_6C61_6202  # two storing at once would each drop for the other's run too
    QUEUE = 0x6167_6C61_6203  # a person's share and the line's capacity, checked and booked
    CLASS_START = 0x6167_6C61_6206  # a teacher's one class, and the server's cap on classes
    LOOK_FOR_DEAD = 0x6167_6C61_6207  # one upload host at a time puts dead upload hosts' runs back
    PRUNE_CLASSES = 0x6167_6C61_6208  # one web process at a time deletes long-ended classes


def lock(db, key: Lock, wait: bool = True) -> bool:
    """Take the advisory lock `key` for the rest of `db`'s transaction (released when it
    ends, committed or not). wait=False: take it only if no one holds it; whether it was
    taken (True when waiting: it always is, or the lock timeout ends the transaction)."""
    if wait:
        db.execute("SELECT pg_advisory_xact_lock(%s)", (int(key),))
        return True
    return bool(db.execute("SELECT pg_try_advisory_xact_lock(%s)",
                           (int(key),)).fetchone()[0])


# Step 1: the tables as the releases before the version table made them (postgres.py's,
# shared_queue.py's, classes/shared.py's), unchanged, so that a database one of them made
# is adopted without loss.
_TABLES_OF_THE_FIRST_RELEASES = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    seq BIGSERIAL NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    name TEXT NOT NULL,
    size BIGINT NOT NULL,
    doc BYTEA NOT NULL
);
-- the gzip bytes are stored as they are (not compressed again), so that `substring` reads a
-- piece of a run without fetching the rest
ALTER TABLE runs ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE INDEX IF NOT EXISTS runs_by_seq ON runs (seq);
CREATE TABLE IF NOT EXISTS run_heads (
    id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    head TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS run_figures (
    id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    number INTEGER NOT NULL,
    png BYTEA NOT NULL,
    PRIMARY KEY (id, number)
);
CREATE TABLE IF NOT EXISTS lesson_traces (
    key TEXT PRIMARY KEY,
    created DOUBLE PRECISION NOT NULL,
    doc BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS server_secrets (
    name TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS uploads (
    id TEXT PRIMARY KEY,
    seq BIGSERIAL NOT NULL,
    job_id BIGINT,
    client TEXT NOT NULL,
    address TEXT NOT NULL,
    name TEXT NOT NULL,
    source TEXT NOT NULL,
    device TEXT NOT NULL,
    time_limit DOUBLE PRECISION NOT NULL,
    notebook TEXT,
    state TEXT NOT NULL,
    created TIMESTAMPTZ NOT NULL DEFAULT now(),
    started TIMESTAMPTZ,
    ended TIMESTAMPTZ,
    attempts INTEGER NOT NULL DEFAULT 0,
    kept_whole BOOLEAN,
    events INTEGER,
    error_type TEXT,
    detail TEXT,
    host TEXT
);
CREATE INDEX IF NOT EXISTS uploads_open ON uploads (state, seq)
    WHERE state IN ('queued', 'running');
CREATE TABLE IF NOT EXISTS upload_hosts (
    name TEXT PRIMARY KEY,
    slots INTEGER NOT NULL,
    seen TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS classes (
    code TEXT PRIMARY KEY,
    teacher TEXT NOT NULL,
    version BIGINT NOT NULL,
    audience BIGINT NOT NULL,
    ended BOOLEAN NOT NULL DEFAULT false,
    updated TIMESTAMPTZ NOT NULL DEFAULT now(),
    state JSONB NOT NULL
);
CREATE INDEX IF NOT EXISTS classes_open ON classes (teacher) WHERE NOT ended;
"""

# Step 2: the scenarios' Traces under the word the code uses for them. `lesson_traces` (step
# 1) is only a cache, and is left where it is: a process of the release before, still running
# beside this one while a course restarts, keeps using it.
_SCENARIO_TRACES = """
CREATE TABLE IF NOT EXISTS scenario_traces (
    key TEXT PRIMARY KEY,
    created DOUBLE PRECISION NOT NULL,
    doc BYTEA NOT NULL
);
"""

# Step 3: whose each run is, and how long it is kept whatever the bounds (a run sent to a
# class's teacher): the store's bound drops the biggest holder's runs first (fair_share.py).
# Additive, with defaults: a process of the release before writes rows without them.
_RUN_OWNERS = """
ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN IF NOT EXISTS pinned_until DOUBLE PRECISION NOT NULL DEFAULT 0;
"""

# Step 4: named teachers' tokens, kept as digests (store/teachers.py). A new table: a process
# of the release before never reads it.
_TEACHER_TOKENS = """
CREATE TABLE IF NOT EXISTS teacher_tokens (
    name TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    created DOUBLE PRECISION NOT NULL,
    revoked DOUBLE PRECISION
);
"""

# Step 5: where each run came from: the store's fair share counts an address's runs too, a
# fresh cookie being one page load away (fair_share.py). Additive, with a default: a process of
# the release before writes rows without it, read as from no known address.
_RUN_ADDRESSES = """
ALTER TABLE runs ADD COLUMN IF NOT EXISTS address TEXT NOT NULL DEFAULT '';
"""

# Step 6: how many people follow each class on each web process (classes/shared.py reports its
# own every few seconds), so the admin page counts a class's followers over all of them. A new
# table: a process of the release before never reads it.
_CLASS_FOLLOWERS = """
CREATE TABLE IF NOT EXISTS class_followers (
    process TEXT NOT NULL,
    code TEXT NOT NULL,
    followers INTEGER NOT NULL,
    seen TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (process, code)
);
"""

# The schema's steps, in order: step n is STEPS[n - 1]. Append; never edit a released one.
STEPS: tuple[str, ...] = (_TABLES_OF_THE_FIRST_RELEASES, _SCENARIO_TRACES, _RUN_OWNERS,
                          _TEACHER_TOKENS, _RUN_ADDRESSES, _CLASS_FOLLOWERS)

_VERSIONS = """
CREATE TABLE IF NOT EXISTS autograd_lab_schema (
    version INTEGER PRIMARY KEY,
    applied TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


def redacted(url: str) -> str:
    """The URL's host, port, database and user only, for the operator's messages and logs:
    no password, nor any other parameter (an sslkey's path, a passfile's)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 - a URL that does not parse says nothing of itself
        return "(a PostgreSQL URL that does not parse)"
    kept = {k: v for k, v in parts.items() if k in ("host", "hostaddr", "port", "dbname", "user")}
    return make_conninfo(**kept)


def _lost(exc: Exception) -> bool:
    """Is `exc` a connection that failed or none to be had (the database may be away), not a
    statement's own failure (a timeout, a lock not granted, a conflict)?"""
    from psycopg import OperationalError
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout):
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    # no SQLSTATE: libpq's own failure (the connection closed); class 08: a connection
    # exception; 57P01-03: the server shutting down or starting
    return isinstance(exc, OperationalError) and (
        sqlstate is None or sqlstate.startswith("08") or sqlstate in ("57P01", "57P02",
                                                                     "57P03"))


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


class Database:
    """The shared mode's database: opened once (pool and schema), then asked for transactions
    by whoever keeps something in it."""

    def __init__(self, url: str, pool_size: int = 8,
                 reconnect_s: float = RECONNECT_S) -> None:
        self.url = url
        self.pool_size = pool_size
        self.reconnect_s = reconnect_s
        self._pool = None
        self._open_lock = threading.Lock()
        self._opened = False
        # known to be away: its transactions refused at once until a probe sees it back
        self.outage = Outage(url, on_return=self._mend_pool)

    def __repr__(self) -> str:
        return f"Database({redacted(self.url)!r})"

    # ---- opening and closing ------------------------------------------------------------------

    def open(self) -> Database:
        """Connect, and bring the schema to this release's version. The server (and a worker)
        calls it at start-up, so that a database it cannot reach fails there, with what to
        check; otherwise the first transaction does."""
        with self._open_lock:
            if self._opened:
                return self
            try:
                import psycopg
                from psycopg_pool import ConnectionPool
            except ImportError as exc:
                raise StoreUnavailable(
                    "AUTOGRAD_LAB_DATABASE_URL is set, but psycopg (with its pool) is not "
                    "installed: pip install 'autograd-lab[shared]'") from exc
            try:  # once by hand: the pool would retry a refused connection until its timeout
                psycopg.connect(self.url, connect_timeout=10).close()
            except psycopg.ProgrammingError:  # libpq's words quote the URL, password and all
                raise StoreUnavailable("AUTOGRAD_LAB_DATABASE_URL does not parse as a "
                                       "PostgreSQL URL (postgresql://user:password@host/db; "
                                       "percent-encode special characters)") from None
            except psycopg.Error as exc:
                raise StoreUnavailable(
                    f"PostgreSQL at {redacted(self.url)} cannot be reached "
                    f"({_first_line(exc)}); check AUTOGRAD_LAB_DATABASE_URL and that the server "
                    "is up") from None  # the chained error's text may hold the URL
            # timeout: how long a request waits for a connection; short, so that with the
            # database down a page says so in seconds, not after the browser gave up
            # statement and lock timeouts: no question to the database, and no wait for a
            # row's lock (a class's), holds a request (or the event loop) for long
            # reconnect_timeout: see RECONNECT_S; its give-up tells the outage's probe too
            pool = ConnectionPool(self.url, min_size=1, max_size=self.pool_size, open=False,
                                  timeout=3, name="autograd-lab-store",
                                  reconnect_timeout=self.reconnect_s,
                                  reconnect_failed=lambda _: self.outage.suspect(),
                                  kwargs={"options": f"-c statement_timeout={STATEMENT_MS} "
                                                     f"-c lock_timeout={LOCK_MS}",
                                          "connect_timeout": CONNECT_S})
            pool.open(wait=True, timeout=15)
            self._pool = pool
            try:
                with self._pool.connection() as db:
                    self._migrate(db)
            except BaseException:
                self._pool = None
                pool.close()
                raise
            self._opened = True
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def _mend_pool(self) -> None:
        """The database is back (the outage's probe connected): the pool's idle connections,
        broken when it went away, are replaced now, and it may grow at once, rather than the
        next requests each finding a broken one."""
        pool = self._pool
        if pool is not None and not pool.closed:
            pool.check()

    def pool_stats(self) -> dict | None:
        """The pool as the metrics show it (app/web/metrics.py): connections open, the most it
        may open, lent out, requests waiting for one, and requests that failed or timed out
        since it opened; None before it opens."""
        pool = self._pool
        if pool is None:
            return None
        stats = pool.get_stats()  # get, not pop: psycopg_pool's counters are not reset
        size = stats.get("pool_size", 0)
        return {"size": size, "max": stats.get("pool_max", self.pool_size),
                "in_use": size - stats.get("pool_available", 0),
                "waiting": stats.get("requests_waiting", 0),
                "errors": stats.get("requests_errors", 0)}

    @property
    def pool(self):
        """The connection pool, opened: for a library that takes one (Procrastinate's
        connector, which runs its own statements in its own transactions)."""
        if not self._opened:
            self.open()
        return self._pool

    # ---- the schema ---------------------------------------------------------------------------

    @staticmethod
    def _migrate(db) -> None:
        """The steps `db`'s database lacks, applied in this transaction, under the schema lock
        (another process starting now waits, then finds them applied)."""
        lock(db, Lock.SCHEMA)
        db.execute(_VERSIONS)
        version = db.execute("SELECT COALESCE(MAX(version), 0) FROM autograd_lab_schema") \
            .fetchone()[0]
        if version > len(STEPS):
            # a later release's database: its steps are additive, so this one works beside
            # them (while a course's processes are restarted one by one)
            log.warning("the database's schema is version %d, this release's %d: a later "
                        "release made it", version, len(STEPS))
        for number in range(version + 1, len(STEPS) + 1):
            db.execute(STEPS[number - 1])
            db.execute("INSERT INTO autograd_lab_schema (version) VALUES (%s)", (number,))
            log.info("the database's schema is now version %d", number)

    def schema_version(self) -> int:
        """The number of the last step applied to the database (opened first if it is not:
        this release's steps applied)."""
        with self.transaction() as db:
            return db.execute("SELECT COALESCE(MAX(version), 0) FROM autograd_lab_schema") \
                .fetchone()[0]

    def procrastinate_schema(self) -> None:
        """Procrastinate's tables (the shared line's jobs), made from the installed
        Procrastinate's own schema if they are missing, under the schema lock. Not a step of
        ours: its schema is its release's, and only a web process or an upload host of the shared
        line needs it (the run store alone does not import Procrastinate)."""
        with self.transaction() as db:
            lock(db, Lock.SCHEMA)
            made = db.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL") \
                .fetchone()[0]
            if not made:
                from procrastinate import schema

                db.execute(schema.SchemaManager.get_schema())

    # ---- using it -----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator:
        """A connection of the pool for one transaction, committed on leaving (rolled back if
        the block raises). A database that cannot be reached, or a statement or lock wait past
        its timeout, is StoreUnavailable: the caller answers 503, try again in a minute."""
        if self.outage.down:  # at once: no wait for a pool that cannot connect
            raise StoreUnavailable(DOWN)
        if not self._opened:
            self.open()
        from psycopg import OperationalError
        from psycopg.errors import QueryCanceled
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as db:  # one transaction: committed on leaving
                yield db
        except (OperationalError, PoolTimeout, QueryCanceled) as exc:
            # the details (the database's address, its user) go to the log, not to whoever
            # asked: the answer says what to do
            log.warning("the run store cannot be reached: %s", _first_line(exc))
            if _lost(exc):
                self.outage.suspect()
            raise StoreUnavailable(DOWN) from exc

    def reachable(self) -> tuple[bool, str]:
        """(can the database be asked now, what /healthz says of it: not where it is, which
        is the operator's to know and a stranger's to guess)."""
        try:
            with self.transaction() as db:
                db.execute("SELECT 1")
        except StoreUnavailable as exc:
            return False, str(exc)
        return True, "PostgreSQL, shared by this course's web processes and upload hosts"
