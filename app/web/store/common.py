"""What every run store shares with its callers: a run's link, where its bytes lie, and the
two ways a read can fail. Routes and services import these, never a store's implementation."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

__all__ = ["RunGone", "RunReader", "StoreUnavailable", "StoredBlob", "run_link"]


def run_link(run_id: str) -> dict:
    return {"id": run_id, "link": f"/runs/{run_id}"}


@dataclass(frozen=True)
class StoredBlob:
    """Where a run's gzip JSON lies: its row and its length in bytes."""
    run_id: str
    rowid: int
    size: int


class RunGone(Exception):
    """The run was dropped (or replaced) while its blob was being read."""


class StoreUnavailable(RuntimeError):
    """The store cannot be reached (a shared store's database is down): what was asked cannot
    be answered now; the error handler answers 503 with Retry-After."""


class RunReader(Protocol):
    """What routes read of a run store, whichever it is (sqlite.py's `RunStore`, postgres.py's
    `PostgresRunStore`): a route types its store by this, and is handed the store by
    `deps.StoreDep`."""

    def reachable(self) -> tuple[bool, str]: ...

    def exists(self, run_id: str) -> bool: ...

    def get(self, run_id: str) -> dict | None: ...

    def blob(self, run_id: str) -> StoredBlob | None: ...

    def chunks(self, blob: StoredBlob) -> Iterator[bytes]: ...

    def head(self, run_id: str) -> dict | None: ...

    def figure(self, run_id: str, number: int) -> bytes | None: ...

    def gradient_flow(self, run_id: str) -> dict | None: ...

    def pin(self, run_id: str, seconds: float = ...) -> None:
        """Keep the run a while whatever the store's bounds (a run sent to a class's teacher:
        fair_share.py)."""
