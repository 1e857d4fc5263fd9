"""The run store in PostgreSQL (`AUTOGRAD_LAB_DATABASE_URL`): the same store as sqlite.py's, its
rules unchanged (the stored bytes are the gzip of the JSON `GET /api/runs/{id}` answers, read
in pieces, never parsed; the head and figures beside it; bounded in runs and bytes, oldest
first), kept where every web process of a course reads it, and where a restart loses nothing.
Beside the runs it keeps the server's secrets (the cookies' signing key), made once by the
first process that asks and read by every other.

Its statements run in transactions of the course's Database (database.py: the pool, the
tables, the advisory locks); every statement is parameterised. A Trace is written as an
upsert keyed by its run id: whoever stores a run a second time (a run retried on another
worker) replaces it whole. The gzip bytes are stored uncompressed by PostgreSQL (`STORAGE
EXTERNAL`), so `substring` reads a piece without fetching the rest."""

from __future__ import annotations

import gzip
import hashlib
import json
import secrets
import time
from collections.abc import Iterator

from app.web.settings import default_of

from .common import RunGone, StoredBlob
from .database import Database, Lock, lock, redacted
from .fair_share import PIN_S, victims
from .sqlite import CHUNK, RunStore, _head, _pack, _size

__all__ = ["PostgresRunStore", "SIGNING_KEY"]

SIGNING_KEY = "cookie-signing-key"


def _scenario_key(key: tuple) -> str:
    return hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()


class PostgresRunStore(RunStore):
    """RunStore's rules over PostgreSQL tables instead of a SQLite file. `database`: the
    course's Database (database.py), or its URL, and then the store makes its own, with
    `pool_size` connections, and closes it with itself."""

    def __init__(self, database: Database | str, max_runs: int = default_of("store_max_runs"),
                 max_bytes: int = default_of("store_max_bytes"),
                 max_run_bytes: int = default_of("store_max_run_bytes"),
                 pool_size: int = 8,
                 people_per_address: int = default_of("per_address_people")):
        super().__init__(path=".", max_runs=max_runs, max_bytes=max_bytes,
                         max_run_bytes=max_run_bytes, people_per_address=people_per_address)
        self._owns_database = isinstance(database, str)
        self.database = Database(database, pool_size) if self._owns_database else database
        self.url = self.database.url

    def __repr__(self) -> str:
        return f"PostgresRunStore({redacted(self.url)!r})"

    def open(self) -> PostgresRunStore:
        """Open the database (its pool, its tables); the server calls it at start-up, so that
        a database it cannot reach fails there, with what to check."""
        self.database.open()
        self._opened = True
        return self

    def close(self) -> None:
        if self._owns_database:
            self.database.close()

    def reachable(self) -> tuple[bool, str]:
        """(can the database be asked now, what /healthz says of it)."""
        return self.database.reachable()

    # ---- writing ------------------------------------------------------------------------------

    def keep(self, doc: dict, run_id: str, owner: str = "", address: str = "") -> bool:
        packed = self.pack(doc, run_id)
        with self.database.transaction() as db:
            over = self.write(db, run_id, packed, owner, address)
        if over:
            self.prune(keep=run_id)
        return packed[2]

    def write(self, db, run_id: str, packed: tuple, owner: str = "", address: str = "") -> bool:
        """Write a Trace packed by `pack` (outside any transaction: gzip takes a while) in
        `db`'s transaction: the shared line closes the run's row in the same one
        (runs/upload_host.py). True if the store is now past its bounds (asked without a lock:
        nearly always it is not, and nothing waits for anyone): then the caller prunes once
        this transaction is committed."""
        stored, blob, _, figures = packed
        # an upsert: a run stored twice (retried on another worker) is replaced whole, and
        # given a new seq, so a reader of the old bytes is told RunGone
        db.execute(
            "INSERT INTO runs (id, created, name, size, doc, owner, address) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET created = EXCLUDED.created, "
            "name = EXCLUDED.name, size = EXCLUDED.size, doc = EXCLUDED.doc, "
            "owner = EXCLUDED.owner, address = EXCLUDED.address, "
            "seq = nextval(pg_get_serial_sequence('runs', 'seq'))",
            (run_id, time.time(), stored["script"]["name"], _size(blob, figures), blob, owner,
             address))
        db.execute("INSERT INTO run_heads (id, head) VALUES (%s, %s) ON CONFLICT (id) "
                   "DO UPDATE SET head = EXCLUDED.head",
                   (run_id, json.dumps(_head(stored, figures))))
        db.execute("DELETE FROM run_figures WHERE id = %s", (run_id,))
        if figures:
            with db.cursor() as cur:
                cur.executemany("INSERT INTO run_figures (id, number, png) VALUES (%s, %s, %s)",
                                [(run_id, n, png) for n, png in enumerate(figures)])
        return not self._within_bounds(*self._totals(db))

    def prune(self, keep: str) -> None:
        """The oldest runs past the bounds go, in a transaction of its own (a bound's sweep
        never holds a new run's lock), by one process at a time."""
        with self.database.transaction() as db:
            lock(db, Lock.PRUNE)
            self._prune(db, keep)

    @staticmethod
    def _totals(db) -> tuple[int, int]:
        return db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM runs").fetchone()

    def _within_bounds(self, count: int, total: int) -> bool:
        return count <= self.max_runs and total <= self.max_bytes

    def pin(self, run_id: str, seconds: float = PIN_S) -> None:
        """Keep the run for `seconds` whatever the bounds (a run sent to a class's teacher)."""
        with self.database.transaction() as db:
            db.execute("UPDATE runs SET pinned_until = GREATEST(pinned_until, %s) "
                       "WHERE id = %s", (time.time() + seconds, run_id))

    def _prune(self, db, keep: str) -> None:
        # asked again, whole: another process may have swept (fair_share.py chooses)
        rows = db.execute("SELECT id, size, owner, pinned_until, address FROM runs ORDER BY seq")
        # open classes' teachers: their runs are kept (every process sees the same classes)
        teachers = [t for (t,) in db.execute("SELECT teacher FROM classes WHERE NOT ended")]
        gone = victims(rows.fetchall(), keep, time.time(), self.max_runs, self.max_bytes,
                       self.people_per_address, teachers)
        if not gone:
            return
        db.execute("DELETE FROM runs WHERE id = ANY(%s)", (gone,))  # heads, figures: cascade
        # the shared line's rows of those runs (their scripts) go with them, ended ones only
        db.execute("DELETE FROM uploads WHERE id = ANY(%s) AND state NOT IN "
                   "('queued', 'running')", (gone,))

    def _upgrade(self, run_id: str) -> None:
        """Nothing older ever wrote these tables."""

    # ---- reading ------------------------------------------------------------------------------

    def exists(self, run_id: str) -> bool:
        with self.database.transaction() as db:
            return db.execute("SELECT 1 FROM runs WHERE id = %s", (run_id,)).fetchone() \
                is not None

    def _parse(self, run_id: str) -> dict | None:
        with self.database.transaction() as db:
            row = db.execute("SELECT doc FROM runs WHERE id = %s", (run_id,)).fetchone()
        if row is None:
            return None
        doc = json.loads(gzip.decompress(row[0]))
        doc.pop("run", None)
        return doc

    def _blob(self, run_id: str) -> tuple[StoredBlob, bool] | None:
        with self.database.transaction() as db:
            row = db.execute("SELECT seq, octet_length(doc) FROM runs WHERE id = %s",
                             (run_id,)).fetchone()
        return None if row is None else (StoredBlob(run_id, row[0], row[1]), True)

    def chunks(self, blob: StoredBlob, size: int = CHUNK) -> Iterator[bytes]:
        for offset in range(0, blob.size, size):
            yield self._piece(blob, offset, size)

    def _piece(self, blob: StoredBlob, offset: int, size: int) -> bytes:
        with self.database.transaction() as db:
            row = db.execute("SELECT substring(doc FROM %s FOR %s) FROM runs "
                             "WHERE id = %s AND seq = %s",
                             (offset + 1, size, blob.run_id, blob.rowid)).fetchone()
        if row is None:
            raise RunGone(blob.run_id)
        return bytes(row[0])

    def _head(self, run_id: str) -> dict | None:
        with self.database.transaction() as db:
            row = db.execute("SELECT head FROM run_heads WHERE id = %s", (run_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def figure(self, run_id: str, number: int) -> bytes | None:
        with self.database.transaction() as db:
            row = db.execute("SELECT png FROM run_figures WHERE id = %s AND number = %s",
                             (run_id, number)).fetchone()
        return None if row is None else bytes(row[0])

    def __len__(self) -> int:
        with self.database.transaction() as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    # ---- scenarios, traced once for every web process ------------------------------------------

    def kept_scenario_trace(self, key: tuple) -> dict | None:
        """A scenario's Trace another web process (or this one, before a restart) traced, by
        TraceService's key (scenario, script hash, arguments, device, torch version)."""
        with self.database.transaction() as db:
            row = db.execute("SELECT doc FROM scenario_traces WHERE key = %s",
                             (_scenario_key(key),)).fetchone()
        return None if row is None else json.loads(gzip.decompress(row[0]))

    def keep_scenario_trace(self, key: tuple, doc: dict) -> None:
        with self.database.transaction() as db:
            db.execute("INSERT INTO scenario_traces (key, created, doc) VALUES (%s, %s, %s) "
                       "ON CONFLICT (key) DO NOTHING", (_scenario_key(key), time.time(),
                                                        _pack(doc)))

    # ---- the server's secrets -----------------------------------------------------------------

    def secret(self, name: str, size: int = 32) -> bytes:
        """The secret `name`, made by the first process that asks (random, `size` bytes) and
        the same for every process after it, across restarts."""
        with self.database.transaction() as db:
            db.execute("INSERT INTO server_secrets (name, value) VALUES (%s, %s) "
                       "ON CONFLICT (name) DO NOTHING", (name, secrets.token_bytes(size)))
            return bytes(db.execute("SELECT value FROM server_secrets WHERE name = %s",
                                    (name,)).fetchone()[0])
