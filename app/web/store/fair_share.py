"""Which runs go when the run store is past its bounds: the person holding the most goes first.

Oldest-first let one member empty the store: 18 runs of 15 MB each pushed every other run out,
the run a student had just sent to the teacher included (issue 38). Now the runs of whoever
holds the most (bytes when the bytes bound is past, runs when the count is) go first, oldest
first, one at a time; everyone else's are touched only once nobody holds more than they do.
A person is a cookie, and a fresh cookie is one page load away: what a network address holds
counts too, shared by `people_per_address` people (as the run queue counts it), so a stranger
with a cookie per run holds as much as the address does, over the people it may stand for.

A run pinned (sent to a class's teacher) stays until its pin ends, within bounds of its own:
PINNED_PER_PERSON runs a person, times `people_per_address` an address, and a quarter of the
store's runs and bytes in all, handed out fairly (whoever has fewest kept pins gets the next).
Four browsers pinning 20 runs had every other run dropped (issue 38); pins past those bounds
are ordinary runs, and pinned or not, a run counts in its owner's share. The run just stored
always answers its own link once. `owner` is the client key that sent the run ("" for runs
kept before owners were: they share one owner), `address` where it came from ("" unknown).
The runs of a teacher whose class is open (`teachers`: their client keys) are kept as pins
are, without a person's bound of 3, within the same quarter of the store. Pure: both stores
call it with their rows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["PINNED_PER_PERSON", "PIN_S", "victims"]

PIN_S = 12 * 3600  # a run sent to a class's teacher is kept this long: a class day
PINNED_PER_PERSON = 3  # a person's runs kept by their pins; more pins are ordinary runs
PINNED_SHARE = 4  # pins keep at most 1/4 of the store's runs and bytes: the rest is everyone's

Row = tuple[str, int, str, float, str]  # id, size, owner, pinned until, address


def victims(rows: Iterable[tuple], keep: str, now: float, max_runs: int, max_bytes: int,
            people_per_address: int = 4, teachers: Iterable[str] = ()) -> list[str]:
    """Ids to drop, in order, from `rows` (id, size, owner, pinned until[, address]), oldest
    first."""
    rows = [(*row, "")[:5] for row in rows]
    people = max(1, people_per_address)
    count, total = len(rows), sum(row[1] for row in rows)
    held_bytes: dict[str, float] = {}
    held_runs: dict[str, float] = {}
    for _, size, owner, _, address in rows:
        for key in _holders(owner, address):
            held_bytes[key] = held_bytes.get(key, 0) + size
            held_runs[key] = held_runs.get(key, 0) + 1
    kept = _kept_pins(rows, now, max_runs, max_bytes, people, set(teachers))
    droppable: dict[tuple[str, str], deque] = {}  # (owner, address) -> (place, id, size)
    for place, (run_id, size, owner, _, address) in enumerate(rows):
        if run_id != keep and run_id not in kept:
            droppable.setdefault((owner, address), deque()).append((place, run_id, size))

    def weight(held: dict, who: tuple[str, str]) -> tuple:
        owner, address = who
        at_address = held.get("@" + address, 0) if address else 0
        # the biggest holder, a person or their address's share; between equals the address
        # holding more, then the one whose oldest run is oldest
        return (max(held["~" + owner], at_address / people), at_address,
                -droppable[who][0][0])

    out = []
    while (count > max_runs or total > max_bytes) and droppable:
        held = held_bytes if total > max_bytes else held_runs
        who = max(droppable, key=lambda w: weight(held, w))
        _, run_id, size = droppable[who].popleft()
        if not droppable[who]:
            del droppable[who]
        out.append(run_id)
        count, total = count - 1, total - size
        for key in _holders(*who):
            held_bytes[key] -= size
            held_runs[key] -= 1
    return out


def _holders(owner: str, address: str) -> tuple[str, ...]:
    return ("~" + owner, "@" + address) if address else ("~" + owner,)


def _kept_pins(rows: list[Row], now: float, max_runs: int, max_bytes: int,
               people: int, teachers: set[str]) -> set[str]:
    """The pinned runs their pins keep (and open classes' teachers' runs): each person's newest
    first, the next one always to whoever (person, then address) has fewest kept, within every
    bound; a teacher's first."""
    waiting: dict[tuple[str, str], list[Row]] = {}  # newest last: popped first
    for row in rows:
        if row[3] > now or row[2] in teachers:
            waiting.setdefault((row[2], row[4]), []).append(row)
    room_runs, room_bytes = max(1, max_runs // PINNED_SHARE), max_bytes // PINNED_SHARE
    by_person: dict[str, int] = {}
    by_address: dict[str, int] = {}
    kept: set[str] = set()
    while waiting:
        who = min(waiting, key=lambda w: (w[0] not in teachers,
                                          by_address.get(w[1], 0) / people if w[1] else 0,
                                          by_person.get(w[0], 0)))
        owner, address = who
        run_id, size, *_ = waiting[who].pop()
        if not waiting[who]:
            del waiting[who]
        teacher = owner in teachers
        if (not teacher and (by_person.get(owner, 0) >= PINNED_PER_PERSON or (
                address and by_address.get(address, 0) >= PINNED_PER_PERSON * people))
                or size > room_bytes):
            continue
        if room_runs < 1:
            break
        kept.add(run_id)
        room_runs, room_bytes = room_runs - 1, room_bytes - size
        by_person[owner] = by_person.get(owner, 0) + 1
        if address and not teacher:
            by_address[address] = by_address.get(address, 0) + 1
    return kept
