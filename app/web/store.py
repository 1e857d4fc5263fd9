"""Runs people submitted, kept on disk (SQLite), bounded in number and bytes, oldest dropped
first. A run's link keeps working across restarts until the bound pushes it out."""

from __future__ import annotations

import gzip
import json
import secrets
import sqlite3
import threading
import time
from pathlib import Path

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
    def __init__(self, path: Path, max_runs: int = 500, max_bytes: int = 256 * 1024 * 1024):
        self.path = Path(path)
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def put(self, doc: dict) -> str:
        """Keep `doc`; returns its id (unguessable: a link is the only way to a run)."""
        run_id = secrets.token_urlsafe(9)
        blob = gzip.compress(json.dumps(doc, separators=(",", ":")).encode("utf-8"))
        with self._lock, self._connect() as db:
            db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                       (run_id, time.time(), doc["script"]["name"], len(blob), blob))
            self._prune(db)
        return run_id

    def get(self, run_id: str) -> dict | None:
        with self._connect() as db:
            row = db.execute("SELECT doc FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else json.loads(gzip.decompress(row[0]))

    def __len__(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def _prune(self, db: sqlite3.Connection) -> None:
        count, total = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM runs").fetchone()
        rows = db.execute("SELECT id, size FROM runs ORDER BY created, rowid").fetchall()
        for run_id, size in rows:
            if count <= self.max_runs and total <= self.max_bytes:
                break
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            count, total = count - 1, total - size
