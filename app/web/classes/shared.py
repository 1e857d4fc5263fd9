"""`SharedClassroom`: the `Classroom` (classroom.py) of the shared mode
(`AUTOGRAD_LAB_DATABASE_URL`). Every web process serves the same classes, their state kept in
PostgreSQL, so that a student whose requests reach web process A follows a teacher on web
process B, `Last-Event-ID` resumes on either, and a restart ends no class. The `classes` table,
like every table of that database, is made by the Database (store/database.py); the
statements here run in its transactions.

Each class is one row: its `ClassState` (state.py) as `to_dict` makes it. A change (`change`)
takes the row's lock, reads the state into this process's session, applies the change there
(the state's own rules, the same as on one machine), writes it back and `NOTIFY`s a small
payload: the class, its version and its audience count. Every web process `LISTEN`s
(`listen`): a class it holds whose numbers moved is read again from its row, once per process,
and its own streams are woken. The streams, their followers and their caps stay each
process's own (`ClassSession`, session.py).

Reads of other processes' classes go to the table: `member_of` (may this browser run code
without the token) and `people_at` (a room that shares one address). Whose a run is, the
shared line's `uploads` row says (runs/shared_queue.py).

A change runs its statements on the calling thread (a route on the event loop waits for a few
milliseconds on loopback); the follower fan-out touches the database once per change per
process, never per follower.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from app.web.client_keys import is_browser
from app.web.settings import default_of
from app.web.store.database import Database, Lock, lock

from .classroom import ProcessStreams, enter, new_code, require_teacher
from .session import ClassSession
from .state import CODE_PATTERN, ClassError, ClassState
from .wrong_codes import WrongCodes

__all__ = ["SharedClassroom", "CHANNEL"]

log = logging.getLogger(__name__)

CHANNEL = "autograd_lab_classes"
T = TypeVar("T")


class SharedClassroom(ProcessStreams):
    def __init__(self, database: Database, max_sessions: int = default_of("max_classes"),
                 idle_hours: float = 12,
                 people_per_address: int = default_of("per_address_people")) -> None:
        super().__init__()
        self.database = database
        self.max_sessions = max_sessions
        self.people_per_address = people_per_address
        self.idle_seconds = idle_hours * 3600
        self.sessions: dict[str, ClassSession] = {}  # the classes this process serves
        self.wrong_codes = WrongCodes()

    # ---- changes ---------------------------------------------------------------------------

    def change(self, session: ClassSession, act: Callable[[ClassState], T]) -> T:
        """`act(state)` on the class's state as the table has it, under the row's lock; the
        state written back and every web process told, also when `act` refused (a refusal
        may count: a browser turned away is shown to the teacher)."""
        with self.database.transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE code = %s FOR UPDATE",
                             (session.code,)).fetchone()
            if row is None:
                raise ClassError(404, f"there is no class {session.code!r} here any more",
                                 "no_class")
            session.replace(ClassState.from_dict(row[0]))
            if session.ended:
                raise ClassError(409, "this class has ended", "class_ended")
            before = session.state.to_dict()
            try:
                return session.apply(act)
            finally:
                if session.state.to_dict() != before:
                    try:
                        self._write(db, session.state)
                        # committed now: a refusal may have counted too (a browser turned
                        # away is shown to the teacher), and an exception would roll it back
                        db.commit()
                    except BaseException:
                        # not written: this process's streams must not keep a state no other
                        # process has (nor take the real next version for one seen)
                        session.replace(ClassState.from_dict(row[0]))
                        session.wake_all()
                        raise

    def _write(self, db, state: ClassState) -> None:
        from psycopg.types.json import Jsonb

        db.execute("UPDATE classes SET version = %s, audience = %s, ended = %s, "
                   "updated = now(), state = %s WHERE code = %s",
                   (state.version, state.audience, state.ended, Jsonb(state.to_dict()),
                    state.code))
        db.execute("SELECT pg_notify(%s, %s)",
                   (CHANNEL, f"{state.code}:{state.version}:{state.audience}"))

    def start(self, teacher: str) -> ClassSession:
        from psycopg.types.json import Jsonb

        with self.database.transaction() as db:
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
                state = ClassState(code=new_code(), teacher=teacher,
                                   people=self.people_per_address)
                made = db.execute(
                    "INSERT INTO classes (code, teacher, version, audience, state) VALUES "
                    "(%s, %s, 0, 0, %s) ON CONFLICT (code) DO NOTHING RETURNING code",
                    (state.code, teacher, Jsonb(state.to_dict()))).fetchone()
                if made is not None:
                    break
        session = self.sessions[state.code] = ClassSession(state)
        return session

    def end(self, session: ClassSession) -> None:
        self.change(session, lambda s: s.end())
        self.sessions.pop(session.code, None)

    # ---- the way in --------------------------------------------------------------------------

    def get(self, code: str, address: str = "", client: str = "",
            join: bool = True) -> ClassSession:
        code = code.upper()
        if not CODE_PATTERN.fullmatch(code):
            return enter(self, None, code, address, client, join)
        if code not in self.sessions and not self.wrong_codes.guessing(address):
            # another process's class: held here from now on (a guesser past its count is
            # refused without asking the table)
            self._load(code)
        return enter(self, self.sessions.get(code), code, address, client, join)

    def teaching(self, code: str, client: str, address: str = "") -> ClassSession:
        return require_teacher(self.get(code, address, client, join=False), client)

    def _load(self, code: str) -> None:
        with self.database.transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE code = %s AND NOT ended",
                             (code,)).fetchone()
        if row is not None:
            self._held(row[0])

    def _held(self, data: dict) -> ClassSession:
        """The session of the stored state `data`, held by this process (its streams wait on
        it)."""
        state = ClassState.from_dict(data)
        session = self.sessions.get(state.code)
        if session is None:
            session = self.sessions[state.code] = ClassSession(state)
        else:
            session.replace(state)
        return session

    # ---- streams: this process's own ------------------------------------------------------------


    # ---- what other processes' classes say ------------------------------------------------------

    def member_of(self, client: str) -> str | None:
        if not is_browser(client):  # an address is never a member
            return None
        with self.database.transaction() as db:
            # members keyed by client; a row of the release before holds them as a list
            row = db.execute("SELECT code FROM classes WHERE NOT ended AND (state->'members' ? "
                             "%s OR state->'members' @> jsonb_build_array(jsonb_build_object("
                             "'client', %s::text))) LIMIT 1", (client, client)).fetchone()
        return None if row is None else row[0]

    def people_at(self, address: str) -> int:
        with self.database.transaction() as db:
            rows = db.execute("SELECT state->'at_address'->>%s FROM classes WHERE NOT ended "
                              "AND state->>'shared_at' = %s", (address, address)).fetchall()
        shared = sum(int(r[0] or 0) for r in rows)
        return max(self.people_per_address, shared)

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
                        self.database.url, autocommit=True) as conn:
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
        if int(version) > session.version or int(audience) > session.state.audience:
            await self._catch_up([code])

    async def _catch_up(self, codes: list[str]) -> None:
        if not codes:
            return
        rows = await asyncio.to_thread(self._states, codes)
        for data in rows:
            session = self.sessions.get(data["code"])
            if session is None:
                continue
            session.replace(ClassState.from_dict(data))  # wakes its streams by what moved
            if session.ended:  # its streams, woken, see it ended; nothing here holds it more
                self.sessions.pop(session.code, None)

    def _states(self, codes: list[str]) -> list[dict]:
        with self.database.transaction() as db:
            return [r[0] for r in db.execute("SELECT state FROM classes WHERE code = ANY(%s)",
                                             (codes,)).fetchall()]
