"""Runs people submitted, kept on disk (SQLite), bounded in number and bytes, oldest dropped
first. A run's link keeps working across restarts until the bound pushes it out.

One run may take at most `max_run_bytes` (compressed): a few hard-to-compress traces must not
push everyone else's runs out. A larger one is kept as its script and an error that says so."""

from __future__ import annotations

import gzip
import json
import secrets
import sqlite3
import threading
import time
from contextlib import closing, contextmanager
from pathlib import Path

from app.format import error_record, new_document

from .settings import default_of

__all__ = ["RunStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    name TEXT NOT NULL,
    size INTEGER NOT NULL,
    doc BLOB NOT NULL
)
"""


class RunStore:
    # the defaults are the settings' own, declared once in settings.py
    def __init__(self, path: Path, max_runs: int = default_of("store_max_runs"),
                 max_bytes: int = default_of("store_max_bytes"),
                 max_run_bytes: int = default_of("store_max_run_bytes")):
        self.path = Path(path)
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.max_run_bytes = max_run_bytes
        self._lock = threading.Lock()  # one writer at a time: put + prune
        self._open_lock = threading.Lock()
        self._opened = False

    def open(self) -> RunStore:
        """Create the folder and the table. The server calls it at start-up, so that a path it
        cannot write fails at once; otherwise the first use does (an app object that never
        stores a run leaves no file behind)."""
        with self._open_lock:
            if not self._opened:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
                    db.execute(_SCHEMA)
                self._opened = True
        return self

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
        blob = _pack(doc)
        if len(blob) > self.max_run_bytes:
            blob = _pack(self._too_large(doc, len(blob)))
        with self._lock, self._connect() as db:
            db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                       (run_id, time.time(), doc["script"]["name"], len(blob), blob))
            self._prune(db, keep=run_id)
        return run_id

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
        with self._connect() as db:
            row = db.execute("SELECT doc FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else json.loads(gzip.decompress(row[0]))

    def __len__(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def _prune(self, db: sqlite3.Connection, keep: str) -> None:
        count, total = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM runs").fetchone()
        # rowid, not `created`: insertion order does not go back when the clock does
        rows = db.execute("SELECT id, size FROM runs ORDER BY rowid").fetchall()
        for run_id, size in rows:
            if count <= self.max_runs and total <= self.max_bytes:
                break
            if run_id == keep:
                continue  # a run larger than the whole bound still answers its own link once
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            count, total = count - 1, total - size


def _pack(doc: dict) -> bytes:
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"))
