"""Classes every web process shares (`AUTOGRAD_LAB_DATABASE_URL`): the same class sessions as
classroom.py, their state kept in PostgreSQL, so that a student whose requests reach web process
A follows a teacher on web process B, `Last-Event-ID` resumes on either, and a restart ends no
class. The `classes` table, like every table of that database, is made by the Database
(store/database.py); the statements here run in its transactions.

Each class is one row: its state as classroom.py's `ClassSession.to_state` makes it (view,
question, answers, members, runs sent in, version). A change (`change`) takes the row's lock,
loads the state into this process's session, applies the change there (the session's own
methods, unchanged), writes it back and `NOTIFY`s a small payload: the class, its version and
its audience count. Every web process `LISTEN`s (`listen`): a class it holds whose numbers moved
is read again from its row, once per process, and its own streams are woken. The streams,
their followers and their caps stay each process's own.

Reads of other processes' classes go to the table: `member_of` (may this browser run code
without the token), `people_at` (a room that shares one address), `started_by` (whose run it
is: the shared line's `uploads` row).

A change runs its statements on the calling thread (a route on the event loop waits for a few
milliseconds on loopback); the follower fan-out touches the database once per change per
process, never per follower.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from app.web.settings import default_of
from app.web.store.database import Lock, lock
from app.web.store.postgres import PostgresRunStore

from .classroom import (
    CODE_PATTERN,
    WRONG_CODES_PER_MINUTE,
    WRONG_CODES_PER_MINUTE_IN_ALL,
    ClassError,
    Classroom,
    ClassSession,
)

__all__ = ["SharedClassroom", "CHANNEL"]

log = logging.getLogger(__name__)

CHANNEL = "autograd_lab_classes"


class SharedClassroom(Classroom):
    def __init__(self, store: PostgresRunStore, max_sessions: int = default_of("max_classes"),
                 idle_hours: float = 12,
                 people_per_address: int = default_of("per_address_people")) -> None:
        super().__init__(max_sessions, idle_hours, people_per_address)
        self.store = store

    # ---- changes ------------------------------------------------------------------------------

    def change(self, session: ClassSession, act):
        """`act(session)` on the class's state as the table has it, under the row's lock; the
        state written back and every web process told, also when `act` refused (a refusal
        may count: a browser turned away is shown to the teacher)."""
        with self.store.database.transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE code = %s FOR UPDATE",
                             (session.code,)).fetchone()
            if row is None:
                raise ClassError(404, f"there is no class {session.code!r} here any more",
                                 "no_class")
            session.load_state(row[0])
            if session.ended:
                raise ClassError(409, "this class has ended", "class_ended")
            before = json.dumps(session.to_state(), sort_keys=True)
            try:
                return act(session)
            finally:
                if json.dumps(session.to_state(), sort_keys=True) != before:
                    try:
                        self._write(db, session)
                        # committed now: a refusal may have counted too (a browser turned
                        # away is shown to the teacher), and an exception would roll it back
                        db.commit()
                    except BaseException:
                        # not written: this process's streams must not keep a state no other
                        # process has (nor take the real next version for one seen)
                        session.load_state(row[0])
                        session._wake_students()
                        session._wake_teacher()
                        raise

    def _write(self, db, session: ClassSession) -> None:
        from psycopg.types.json import Jsonb

        db.execute("UPDATE classes SET version = %s, audience = %s, ended = %s, "
                   "updated = now(), state = %s WHERE code = %s",
                   (session.version, session.audience, session.ended,
                    Jsonb(session.to_state()), session.code))
        db.execute("SELECT pg_notify(%s, %s)",
                   (CHANNEL, f"{session.code}:{session.version}:{session.audience}"))

    def start(self, teacher: str) -> ClassSession:
        from psycopg.types.json import Jsonb

        with self.store.database.transaction() as db:
            lock(db, Lock.CLASS_START)
            # a class idle for longer than the idle time ends, as one machine's would
            db.execute("UPDATE classes SET ended = true, state = jsonb_set(state, '{ended}', "
                       "'true') WHERE NOT ended AND updated < now() - make_interval(secs => %s)",
                       (self.idle_seconds,))
            mine = db.execute("SELECT state FROM classes WHERE teacher = %s AND NOT ended "
                              "LIMIT 1", (teacher,)).fetchone()
            if mine is not None:  # one class per teacher's browser: starting again returns it
                return self._held(mine[0])
            open_now = db.execute("SELECT COUNT(*) FROM classes WHERE NOT ended").fetchone()[0]
            if open_now >= self.max_sessions:
                raise ClassError(429, f"this server has {self.max_sessions} class sessions "
                                      "open; end one (or wait for idle ones to expire) and try "
                                      "again")
            while True:
                code = self._new_code()
                session = ClassSession(code=code, teacher=teacher,
                                       people=self.people_per_address)
                made = db.execute(
                    "INSERT INTO classes (code, teacher, version, audience, state) VALUES "
                    "(%s, %s, 0, 0, %s) ON CONFLICT (code) DO NOTHING RETURNING code",
                    (code, teacher, Jsonb(session.to_state()))).fetchone()
                if made is not None:
                    break
        self.sessions[code] = session
        return session

    def get(self, code: str, address: str = "", client: str = "",
            join: bool = True) -> ClassSession:
        code = code.upper()
        if CODE_PATTERN.fullmatch(code) and code not in self.sessions and \
                not self._guessing(address):
            self._load(code)  # another process's class: held here from now on
        return super().get(code, address, client, join)

    def _guessing(self, address: str) -> bool:
        """Is this address (or the whole server) past its wrong codes for the minute? Then
        the table is not asked: Classroom.get refuses it (429) before it could matter."""
        now = time.monotonic()
        misses = self._wrong_codes.get(address) if address else None
        recent = sum(1 for t in misses if now - t <= 60) if misses else 0
        everyone = sum(1 for t in self._wrong_in_all if now - t <= 60)
        return recent >= WRONG_CODES_PER_MINUTE or everyone >= WRONG_CODES_PER_MINUTE_IN_ALL

    def _load(self, code: str) -> None:
        with self.store.database.transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE code = %s AND NOT ended",
                             (code,)).fetchone()
        if row is not None:
            self._held(row[0])

    def _held(self, state: dict) -> ClassSession:
        """The session of `state`, held by this process (its streams wait on it)."""
        session = self.sessions.get(state["code"])
        if session is None:
            session = self.sessions[state["code"]] = ClassSession.from_state(state)
        else:
            session.load_state(state)
        return session

    def _expire(self) -> None:
        """Idle classes end in the table (`start`); this process lets go of ended ones."""
        for code in [c for c, s in self.sessions.items() if s.ended]:
            self.sessions.pop(code, None)

    # ---- what other processes' classes say ------------------------------------------------------

    def member_of(self, client: str) -> ClassSession | None:
        from app.web.client_keys import is_browser

        if not is_browser(client):
            return None
        with self.store.database.transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE NOT ended AND EXISTS (SELECT 1 "
                             "FROM jsonb_array_elements(state->'members') m WHERE "
                             "m->>'client' = %s) LIMIT 1", (client,)).fetchone()
        return None if row is None else ClassSession.from_state(row[0])

    def people_at(self, address: str) -> int:
        with self.store.database.transaction() as db:
            rows = db.execute("SELECT state->'at_address'->>%s FROM classes WHERE NOT ended "
                              "AND state->>'shared_at' = %s", (address, address)).fetchall()
        shared = sum(int(r[0] or 0) for r in rows)
        return max(self.people_per_address, shared)

    def note_run(self, client: str, run_id: str) -> None:
        """The shared line's `uploads` row says whose each run is."""

    def started_by(self, run_id: str) -> str | None:
        with self.store.database.transaction() as db:
            row = db.execute("SELECT client FROM uploads WHERE id = %s", (run_id,)).fetchone()
        return None if row is None else row[0]

    # ---- hearing of other processes' changes -----------------------------------------------------

    async def listen(self) -> None:
        """Until cancelled: every class change any web process makes, applied to the classes
        this process holds (read once from the table), waking their streams. A lost
        connection is made again, and every held class read again (a change may have been
        missed meanwhile)."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self.store.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await self._catch_up(list(self.sessions))
                    async for note in conn.notifies():
                        await self._heard(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the database went away: listen again
                log.warning("lost the class notifications; listening again", exc_info=True)
                await asyncio.sleep(1.0)

    async def _heard(self, payload: str) -> None:
        code, version, audience = payload.rsplit(":", 2)
        session = self.sessions.get(code)
        if session is None:
            return  # not held here: read from the table when someone asks for it
        if int(version) > session.version or int(audience) > session.audience:
            await self._catch_up([code])

    async def _catch_up(self, codes: list[str]) -> None:
        if not codes:
            return
        rows = await asyncio.to_thread(self._states, codes)
        for state in rows:
            session = self.sessions.get(state["code"])
            if session is None:
                continue
            seen = (session.version, session.audience, session.ended)
            session.load_state(state)
            session.touched = time.monotonic()
            if (session.version, session.ended) != seen[::2]:
                session._wake_students()
            if (session.version, session.audience, session.ended) != seen:
                session._wake_teacher()
            if session.ended:  # its streams, woken, see it ended; nothing here holds it more
                self.sessions.pop(session.code, None)

    def _states(self, codes: list[str]) -> list[dict]:
        with self.store.database.transaction() as db:
            return [r[0] for r in db.execute("SELECT state FROM classes WHERE code = ANY(%s)",
                                             (codes,)).fetchall()]
