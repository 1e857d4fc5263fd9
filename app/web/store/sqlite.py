"""Runs people submitted, kept on disk (SQLite), bounded in number and bytes, oldest dropped
first. A run's link keeps working across restarts until the bound pushes it out.

One run may take at most `max_run_bytes` (compressed): a few hard-to-compress traces must not
push everyone else's runs out. A larger one is kept as its script and an error that says so.

A stored run is read far more often than it is written, and its Trace can be tens of MB: it is
stored as the gzip of exactly the JSON `GET /api/runs/{id}` answers (the Trace and its "run"
link), so that answer is the stored bytes, read in pieces (`blob`, `chunks`), never parsed.
What the other readers need is kept beside it, written in the same transaction: the run page's
head (script name, source, device, torch) in `run_heads`, the figures as PNG bytes in
`run_figures` (their bytes count in the run's size, for the store's bound; `max_run_bytes`
still judges the Trace alone). The `runs` table keeps its columns, so an older server still
opens the file; a run it stored (no head) is rewritten the first time this one needs it
(`_upgrade`), and what it leaves beside a run it drops is swept at the next put.

Whatever must parse a Trace (gradient flow, a drawing not yet made) goes through `get`: the
requests for one run at one time share one parse, which nobody keeps afterwards."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from app.format import error_record, flow, json_text, new_document
from app.lru import LRU
from app.single_flight import SingleFlight
from app.web.settings import default_of

from .common import RunGone, StoredBlob, run_link
from .fair_share import PIN_S, victims

__all__ = ["RunStore"]

_SCHEMA = ("""
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    name TEXT NOT NULL,
    size INTEGER NOT NULL,
    doc BLOB NOT NULL
)
""", """
CREATE TABLE IF NOT EXISTS run_heads (
    id TEXT PRIMARY KEY,
    head TEXT NOT NULL
)
""", """
CREATE TABLE IF NOT EXISTS run_owners (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    pinned_until REAL NOT NULL DEFAULT 0
)
""", """
CREATE TABLE IF NOT EXISTS run_figures (
    id TEXT NOT NULL,
    number INTEGER NOT NULL,
    png BLOB NOT NULL,
    PRIMARY KEY (id, number)
)
""", """
CREATE TABLE IF NOT EXISTS teacher_tokens (
    name TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    created REAL NOT NULL,
    revoked REAL
)
""")
_SIDE_TABLES = ("run_heads", "run_figures", "run_owners")

CHUNK = 128 * 1024  # bytes of a stored blob read at a time
FLOWS_KEPT = 32  # stored runs' gradient flows kept in memory
FLOW_KEPT_NUMBERS = 20_000  # a flow with more numbers (a forged report's) is not kept


def _private(path: Path) -> None:
    """The store holds everyone's scripts and runs: its folder, when made here, is the
    server's alone (0700), and its file is read and written by the server alone (0600; SQLite
    gives its journal the file's mode). A file made by an older release, 0644, is made 0600."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class RunStore:
    # the defaults are the settings' own, declared once in settings.py
    def __init__(self, path: Path, max_runs: int = default_of("store_max_runs"),
                 max_bytes: int = default_of("store_max_bytes"),
                 max_run_bytes: int = default_of("store_max_run_bytes"),
                 people_per_address: int = default_of("per_address_people")):
        self.path = Path(path)
        self.people_per_address = people_per_address  # fair_share.py: an address's share
        # the client keys of open classes' teachers, whose runs are kept (app.py sets it)
        self.teachers: Callable[[], Iterable[str]] = tuple
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.max_run_bytes = max_run_bytes
        self._lock = threading.Lock()  # one writer at a time: put + prune
        self._open_lock = threading.Lock()
        self._opened = False
        self._flights = SingleFlight()
        self._flows: LRU[dict] = LRU(FLOWS_KEPT)

    def open(self) -> RunStore:
        """Create the folder and the tables. The server calls it at start-up, so that a path it
        cannot write fails at once; otherwise the first use does (an app object that never
        stores a run leaves no file behind)."""
        with self._open_lock:
            if not self._opened:
                _private(self.path)
                with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
                    for table in _SCHEMA:
                        db.execute(table)
                    _add_address(db)
                self._opened = True
        return self

    def close(self) -> None:
        """Nothing held open between uses (each use connects to the file)."""

    def reachable(self) -> tuple[bool, str]:
        """(can the store be read now, what /healthz says of it)."""
        return True, "SQLite file on this machine"

    def secret(self, name: str, size: int = 32) -> bytes:
        raise NotImplementedError("one machine keeps no secrets in its SQLite store: the "
                                  "cookies' key is made at start (http/clients.py)")

    @contextmanager
    def _connect(self):
        if not self._opened:
            self.open()
        # `with sqlite3.connect()` commits but does not close: close it too, or every request
        # leaves a file handle to the garbage collector
        with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
            yield db

    @staticmethod
    def new_id() -> str:
        """An unguessable id: a link is the only way to a run."""
        return secrets.token_urlsafe(9)

    def put(self, doc: dict, run_id: str | None = None) -> str:
        """Keep `doc` (under `run_id`, given out before the run ended); returns its id."""
        run_id = run_id or self.new_id()
        self.keep(doc, run_id)
        return run_id

    def pack(self, doc: dict, run_id: str) -> tuple[dict, bytes, bool, list[bytes]]:
        """(what is stored, its gzip JSON, whether it is the whole Trace, its figures): a
        Trace past `max_run_bytes` is stored as its script and an error that says why. Public:
        the shared line packs a Trace (gzip takes a while) before it locks the run's row, and
        hands the result to PostgresRunStore.write (runs/upload_host.py)."""
        stored = _linked(doc, run_id)
        blob = _pack(stored)
        whole = len(blob) <= self.max_run_bytes
        if not whole:
            stored = _linked(self._too_large(doc, len(blob)), run_id)
            blob = _pack(stored)
        return stored, blob, whole, _figures(stored)

    def keep(self, doc: dict, run_id: str, owner: str = "", address: str = "") -> bool:
        """Keep `doc` under `run_id`, as `owner`'s (the client key that sent it, from
        `address`): True if kept as it is, False if it was too large and only its script was
        kept."""
        stored, blob, whole, figures = self.pack(doc, run_id)
        with self._lock, self._connect() as db:
            db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                       (run_id, time.time(), doc["script"]["name"], _size(blob, figures),
                        blob))
            # beside the run, not a column of it: a server of an older release opening the
            # same file still writes its rows as it did (fair_share.py reads both)
            db.execute("INSERT OR REPLACE INTO run_owners (id, owner, address) "
                       "VALUES (?, ?, ?)", (run_id, owner, address))
            _keep_beside(db, run_id, stored, figures)
            self._prune(db, keep=run_id)
        return whole

    def _too_large(self, doc: dict, size: int) -> dict:
        script = doc["script"]
        kept = new_document(script["name"], script["source"], doc.get("device", "cpu"),
                            doc.get("torch"))
        kept["script"]["args"] = list(script.get("args", []))
        kept["error"] = error_record(
            "TraceTooLarge", f"This run's trace takes {size // 1024:,} KiB compressed, more "
            f"than the {self.max_run_bytes // 1024:,} KiB a stored run may take, so only its "
            "script was kept. Run a smaller model or fewer backward passes.")
        return kept

    def exists(self, run_id: str) -> bool:
        """Is the run kept? (Its Trace is neither read nor parsed.)"""
        with self._connect() as db:
            return db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def get(self, run_id: str) -> dict | None:
        """The run's Trace as it was put (without its "run" link). Callers asking for one run
        at the same time share one parsed document: none of them may change it."""
        return self._flights.run(("parse", run_id), lambda: self._parse(run_id))

    def _parse(self, run_id: str) -> dict | None:
        with self._connect() as db:
            row = db.execute("SELECT doc FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        doc = json.loads(gzip.decompress(row[0]))
        doc.pop("run", None)  # the link `put` wrote (or, in an older row, whatever was there)
        return doc

    def blob(self, run_id: str) -> StoredBlob | None:
        """Where the run's gzip JSON (its Trace and "run" link) lies, to be read by `chunks`;
        None if the run is not kept."""
        found = self._blob(run_id)
        if found is not None and not found[1]:
            self._upgrade(run_id)
            found = self._blob(run_id)
        return found[0] if found is not None and found[1] else None

    def _blob(self, run_id: str) -> tuple[StoredBlob, bool] | None:
        """The run's blob and whether it has its head (it was stored by this version)."""
        with self._connect() as db:
            row = db.execute(
                "SELECT r.rowid, length(r.doc), h.id IS NOT NULL FROM runs r "
                "LEFT JOIN run_heads h ON h.id = r.id WHERE r.id = ?", (run_id,)).fetchone()
        return None if row is None else (StoredBlob(run_id, row[0], row[1]), bool(row[2]))

    def chunks(self, blob: StoredBlob, size: int = CHUNK) -> Iterator[bytes]:
        """The blob's bytes, `size` at a time. Each piece is read in a short transaction of
        its own, so a client reading slowly never holds the store's lock (a writer waits for
        readers); RunGone if the run is dropped meanwhile."""
        for offset in range(0, blob.size, size):
            yield self._piece(blob, offset, size)

    def _piece(self, blob: StoredBlob, offset: int, size: int) -> bytes:
        with closing(sqlite3.connect(self.path, timeout=30, isolation_level=None)) as db:
            db.execute("BEGIN")
            try:
                row = db.execute("SELECT id FROM runs WHERE rowid = ?",
                                 (blob.rowid,)).fetchone()
                if row is None or row[0] != blob.run_id:
                    raise RunGone(blob.run_id)
                with db.blobopen("runs", "doc", blob.rowid, readonly=True) as stored:
                    if len(stored) != blob.size:
                        raise RunGone(blob.run_id)
                    stored.seek(offset)
                    return stored.read(size)
            finally:
                db.execute("COMMIT")

    def head(self, run_id: str) -> dict | None:
        """What the run's page shows before the browser fetches the Trace: {"name", "source",
        "device", "torch", "figures" (how many), "notebook" (an uploaded notebook's cell map, or
        None)}; None if the run is not kept."""
        head = self._head(run_id)
        if head is None and self.exists(run_id):
            self._upgrade(run_id)
            head = self._head(run_id)
        return head

    def _head(self, run_id: str) -> dict | None:
        with self._connect() as db:
            # joined: an older server drops runs without their heads
            row = db.execute("SELECT h.head FROM run_heads h JOIN runs r ON r.id = h.id "
                             "WHERE h.id = ?", (run_id,)).fetchone()
        return None if row is None else json.loads(row[0])

    def figure(self, run_id: str, number: int) -> bytes | None:
        """Figure `number`'s bytes as the script's run made them (b"" if they were not
        base64); None if the run or the figure is not kept. See `head` for how many."""
        with self._connect() as db:
            row = db.execute("SELECT f.png FROM run_figures f JOIN runs r ON r.id = f.id "
                             "WHERE f.id = ? AND f.number = ?", (run_id, number)).fetchone()
        return None if row is None else bytes(row[0])

    def gradient_flow(self, run_id: str, doc: dict | None = None) -> dict | None:
        """app/format/flow.py's gradient flow of the run, kept once worked out (it is small,
        and the Trace it comes from can take hundreds of MB parsed); None if not kept. `doc`:
        the run's Trace as stored, when the caller holds it parsed."""
        if not self.exists(run_id):
            return None
        kept = self._flows.get(run_id)
        if kept is not None:
            return kept
        doc = doc if doc is not None else self.get(run_id)
        if doc is None:
            return None
        found = flow.gradient_flow(doc)
        if _numbers(found) <= FLOW_KEPT_NUMBERS:
            self._flows.put(run_id, found)
        return found

    def _upgrade(self, run_id: str) -> None:
        """Rewrite a run an older version stored (no "run" link in its JSON, no head, no
        figures beside it) as this one stores it: once, whoever asks meanwhile waits."""
        self._flights.run(("upgrade", run_id), lambda: self._rewrite(run_id))

    def _rewrite(self, run_id: str) -> None:
        doc = self.get(run_id)
        if doc is None:
            return
        stored = _linked(doc, run_id)
        blob, figures = _pack(stored), _figures(stored)
        with self._lock, self._connect() as db:
            # IMMEDIATE: another server on this file may be rewriting it too; a row with its
            # head is never rewritten, since its bytes may be being served
            db.execute("BEGIN IMMEDIATE")
            if db.execute("SELECT 1 FROM run_heads WHERE id = ?", (run_id,)).fetchone():
                return
            changed = db.execute("UPDATE runs SET doc = ?, size = ? WHERE id = ?",
                                 (blob, _size(blob, figures), run_id)).rowcount
            if changed:
                _keep_beside(db, run_id, stored, figures)
                self._prune(db, keep=run_id)

    def __len__(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def owned(self, limit: int) -> list[dict]:
        """The `limit` runs stored last that someone sent (not the scenarios'), newest first:
        {id, name, created (wall clock), owner (its client key), address}. The admin page's
        runs per person (admin/people.py)."""
        with self._connect() as db:
            rows = db.execute("SELECT r.id, r.name, r.created, o.owner, o.address FROM runs r "
                              "JOIN run_owners o ON o.id = r.id WHERE o.owner <> '' "
                              "ORDER BY r.rowid DESC LIMIT ?", (limit,)).fetchall()
        return [{"id": i, "name": n, "created": c, "owner": o, "address": a}
                for i, n, c, o, a in rows]

    def pin(self, run_id: str, seconds: float = PIN_S) -> None:
        """Keep the run for `seconds` whatever the bounds (a run sent to a class's teacher)."""
        with self._lock, self._connect() as db:
            db.execute("INSERT INTO run_owners (id, owner, pinned_until) SELECT id, '', ? "
                       "FROM runs WHERE id = ? ON CONFLICT (id) DO UPDATE SET pinned_until = "
                       "MAX(pinned_until, excluded.pinned_until)", (time.time() + seconds, run_id))

    def _prune(self, db: sqlite3.Connection, keep: str) -> None:
        # rowid, not `created`: insertion order does not go back when the clock does
        rows = db.execute("SELECT r.id, r.size, COALESCE(o.owner, ''), "
                          "COALESCE(o.pinned_until, 0), COALESCE(o.address, '') FROM runs r "
                          "LEFT JOIN run_owners o ON o.id = r.id ORDER BY r.rowid")
        for run_id in victims(rows.fetchall(), keep, time.time(), self.max_runs, self.max_bytes,
                              self.people_per_address, self.teachers()):
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        for table in _SIDE_TABLES:  # also what an older server left when it dropped a run
            db.execute(f"DELETE FROM {table} WHERE id NOT IN (SELECT id FROM runs)")


def _add_address(db: sqlite3.Connection) -> None:
    """run_owners' `address` (fair_share.py counts an address's runs too), added to a file an
    older release made; its rows read as from no known address."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(run_owners)")}
    if "address" not in columns:
        db.execute("ALTER TABLE run_owners ADD COLUMN address TEXT NOT NULL DEFAULT ''")


def _linked(doc: dict, run_id: str) -> dict:
    # "run" last, where `{**doc, "run": ...}` put it when it was added to every answer
    return {**{k: v for k, v in doc.items() if k != "run"}, "run": run_link(run_id)}


def _head(doc: dict, figures: list[bytes]) -> dict:
    script = doc.get("script") or {}
    return {"name": script.get("name"), "source": script.get("source") or "",
            "device": doc.get("device") or "cpu", "torch": doc.get("torch"),
            "figures": len(figures), "notebook": script.get("notebook")}


def _figures(doc: dict) -> list[bytes]:
    """Each figure's PNG bytes (b"" for one that is not base64: its route says so)."""
    figures = doc.get("figures")
    return [_decoded(f) for f in figures] if isinstance(figures, list) else []


def _decoded(figure: Any) -> bytes:
    try:
        return base64.b64decode(figure["png"], validate=True)
    except (binascii.Error, KeyError, TypeError, ValueError):
        return b""


def _keep_beside(db: sqlite3.Connection, run_id: str, doc: dict, figures: list[bytes]) -> None:
    db.execute("INSERT OR REPLACE INTO run_heads VALUES (?, ?)",
               (run_id, json.dumps(_head(doc, figures))))
    db.executemany("INSERT OR REPLACE INTO run_figures VALUES (?, ?, ?)",
                   [(run_id, n, png) for n, png in enumerate(figures)])


def _size(blob: bytes, figures: list[bytes]) -> int:
    # the figures are kept twice (in the Trace, as base64, and beside it): both count
    return len(blob) + sum(len(png) for png in figures)


def _numbers(gradient_flow: dict) -> int:
    return (sum(len(e["norm"]) + len(e["abs_mean"]) for e in gradient_flow["events"])
            + sum(len(p["norm"]) for p in gradient_flow["params"].values()))


def _pack(doc: dict) -> bytes:
    # level 1: a 48-layer encoder's 6.6 MB Trace in 0.04 s instead of 0.5 s at gzip's default
    # 9, for 2.5 MB kept instead of 2.2 (bench/paste_to_picture.py)
    # and the text from json_text.py: 6 ms for it, against json's 127
    return gzip.compress(json_text.dumps(doc), compresslevel=1)
