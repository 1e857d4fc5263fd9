"""Which runs go when the run store is past its bounds: the person holding the most goes first.

Oldest-first let one member empty the store: 18 runs of 15 MB each pushed every other run out,
the run a student had just sent to the teacher included (issue 38). Now the runs of whoever
holds the most (bytes when the bytes bound is past, runs when the count is) go first, oldest
first, one at a time; everyone else's are touched only once nobody holds more than they do.
A run pinned (sent to a class's teacher) stays until its pin ends, and the run just stored
always answers its own link once. `owner` is the client key that sent the run ("" for runs
kept before owners were: they share one owner). Pure: both stores call it with their rows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["PIN_S", "victims"]

PIN_S = 12 * 3600  # a run sent to a class's teacher is kept this long: a class day


def victims(rows: Iterable[tuple[str, int, str, float]], keep: str, now: float,
            max_runs: int, max_bytes: int) -> list[str]:
    """Ids to drop, in order, from `rows` (id, size, owner, pinned until), oldest first."""
    rows = list(rows)
    count, total = len(rows), sum(size for _, size, _, _ in rows)
    held_bytes: dict[str, int] = {}
    held_runs: dict[str, int] = {}
    droppable: dict[str, deque] = {}  # owner -> (place, id, size), oldest first
    for place, (run_id, size, owner, pinned_until) in enumerate(rows):
        held_bytes[owner] = held_bytes.get(owner, 0) + size
        held_runs[owner] = held_runs.get(owner, 0) + 1
        if run_id != keep and pinned_until <= now:
            droppable.setdefault(owner, deque()).append((place, run_id, size))
    out = []
    while (count > max_runs or total > max_bytes) and droppable:
        held = held_bytes if total > max_bytes else held_runs
        # the biggest holder; between equals, the one whose oldest run is oldest
        owner = max(droppable, key=lambda o: (held[o], -droppable[o][0][0]))
        _, run_id, size = droppable[owner].popleft()
        if not droppable[owner]:
            del droppable[owner]
        out.append(run_id)
        count, total = count - 1, total - size
        held_bytes[owner] -= size
        held_runs[owner] -= 1
    return out
