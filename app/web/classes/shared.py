"""`SharedClassroom`: the `Classroom` (classroom.py) of the shared mode
(`AUTOGRAD_LAB_DATABASE_URL`). Every web process serves the same classes, their state kept in
PostgreSQL, so that a student whose requests reach web process A follows a teacher on web
process B, `Last-Event-ID` resumes on either, and a restart ends no class. The `classes` table,
like every table of that database, is made by the Database (store/database.py); the
statements here run in its transactions.

Each class is one row: its `ClassState` (state.py) as `to_dict` makes it. A change (`change`)
takes the row's lock, reads the state, applies the change to it (the state's own rules, the
same as on one machine), writes it back and `NOTIFY`s a small payload: the class, its version
and its audience count. Every web process `LISTEN`s (`listen`): a class it holds whose
numbers moved is read again from its row, once per process, and its own streams are woken.
The streams, their followers and their caps stay each process's own (`ClassSession`,
session.py).

Reads of other processes' classes go to the table: `member_of` (may this browser run code
without the token) and `people_at` (a room that shares one address). Whose a run is, the
shared line's `uploads` row says (runs/shared_queue.py).

Every question to the database runs in the classroom's own threads, never on the event loop:
a database slow or away holds no other page of the process (issue 39). While it is known to
be away (store/outage.py) a class request is refused at once, 503 with `DOWN`'s sentence;
nothing done before is lost (it is in the table), and when the database is back `listen`
reads every held class again, so open pages catch up. The session takes each state on the
loop (`_publish`), never older than the one it holds. The follower fan-out touches the
database once per change per process, never per follower.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from app.web.client_keys import is_browser
from app.web.settings import default_of
from app.web.store.common import StoreUnavailable
from app.web.store.database import CONNECT_S, Database, Lock, lock

from .classroom import ProcessStreams, enter, new_code, require_teacher
from .session import ClassSession
from .state import CODE_PATTERN, ClassError, ClassState
from .wrong_codes import WrongCodes

__all__ = ["SharedClassroom", "CHANNEL"]

log = logging.getLogger(__name__)

CHANNEL = "autograd_lab_classes"
T = TypeVar("T")
# what a class's page is told while the database is away (503, Retry-After): nothing done in
# the class before is lost, and its open pages get the newest state when it is back (listen)
DOWN = ("the class's database cannot be reached just now, so this was not done: try again "
        "in a few seconds; your page will catch up when it is back")
# routes' calls waiting for the database at once, past which a class request is refused (503)
# rather than queued: each holds a browser's request open, and the pool serves 8 at a time
WAITING_MAX = 64
# each process's count of followers per class, written to `class_followers` this often when it
# moved (and at least every FOLLOWERS_KEEP_S): the admin page sums the rows seen within
# FOLLOWERS_SEEN_S, so a process that died stops counting
FOLLOWERS_EVERY_S = 2.0
FOLLOWERS_KEEP_S = 10.0
FOLLOWERS_SEEN_S = 30
# ended classes past their retention are looked for at start and this often after, by one web
# process at a time (the others skip that round), at most PRUNE_BATCH rows a transaction so
# that a backlog (a retention just shortened) holds no lock for long; a full batch is followed
# at once by the next
PRUNE_EVERY_S = 3600.0
PRUNE_BATCH = 500


class SharedClassroom(ProcessStreams):
    def __init__(self, database: Database, max_sessions: int = default_of("max_classes"),
                 idle_hours: float = 12,
                 people_per_address: int = default_of("per_address_people"),
                 retention_days: float = default_of("ended_class_retention_days")) -> None:
        super().__init__()
        self.database = database
        self.retention_days = retention_days  # 0: ended classes are kept for ever
        self.max_sessions = max_sessions
        self.people_per_address = people_per_address
        self.idle_seconds = idle_hours * 3600
        self.sessions: dict[str, ClassSession] = {}  # the classes this process serves
        self.wrong_codes = WrongCodes()
        # the threads that ask the database for the routes: as many as the pool lends
        self._threads = concurrent.futures.ThreadPoolExecutor(
            database.pool_size, thread_name_prefix="autograd-lab-classes")
        self._waiting = 0  # routes' calls in those threads or waiting for one
        self.process = secrets.token_hex(8)  # this process's rows in `class_followers`

    @contextmanager
    def _transaction(self) -> Iterator:
        """The Database's transaction; the database away is said as the class's (503)."""
        try:
            with self.database.transaction() as db:
                yield db
        except StoreUnavailable as exc:
            raise StoreUnavailable(DOWN) from exc

    # ---- changes ---------------------------------------------------------------------------

    async def change(self, session: ClassSession, act: Callable[[ClassState], T]) -> T:
        """`act(state)` on the class's state as the table has it, under the row's lock (in a
        thread: `_change_kept`); the state written back and every web process told, also when
        `act` refused (a refusal may count: a browser turned away is shown to the teacher).
        This process's session takes the state on the loop, waking its streams."""
        state, result, refusal = await self._off_loop(self._change_kept, session.code, act)
        self._publish(session, state)
        if refusal is not None:
            raise refusal
        return result

    def _change_kept(self, code: str, act: Callable[[ClassState], T]
                     ) -> tuple[ClassState, T | None, Exception | None]:
        """In a thread: the row locked, `act` applied to a state of its own (never the
        session's, which the loop's streams read), written back if it moved and committed.
        (state, what `act` returned, what it raised). Not written (the database went away
        meanwhile): StoreUnavailable, and nothing of it reaches the session."""
        with self._transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE code = %s FOR UPDATE",
                             (code,)).fetchone()
            if row is None:
                raise ClassError(404, f"there is no class {code!r} here any more", "no_class")
            state = ClassState.from_dict(row[0])
            if state.ended:
                return state, None, ClassError(409, "this class has ended", "class_ended")
            before = state.to_dict()
            result, refusal = None, None
            try:
                result = act(state)
            except Exception as exc:  # noqa: BLE001 - raised on the loop, once it is kept
                refusal = exc
            if state.to_dict() != before:
                self._write(db, state)
            return state, result, refusal  # committed on leaving: a refusal may count too

    def _publish(self, session: ClassSession, state: ClassState) -> None:
        """On the loop: `state`, as read or written in a thread, becomes the session's, unless
        the session holds a newer one already (another change, or one heard through LISTEN,
        was taken while this one was in its thread; both marks only grow)."""
        held = session.state
        if (state.version, state.audience, state.ended) >= (held.version, held.audience,
                                                             held.ended):
            session.replace(state)

    async def _off_loop(self, call: Callable[..., T], *args) -> T:
        """`call(*args)` in one of the classroom's threads; at once StoreUnavailable while
        the database is known to be away, or with WAITING_MAX calls waiting already (each
        waits for a pool connection, and the pool is the database's bound)."""
        if self.database.outage.down:
            raise StoreUnavailable(DOWN)
        if self._waiting >= WAITING_MAX:
            raise StoreUnavailable("the class's database is slow to answer just now: try "
                                   "again in a few seconds")
        self._waiting += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, call, *args)
        finally:
            self._waiting -= 1

    def _write(self, db, state: ClassState) -> None:
        from psycopg.types.json import Jsonb

        db.execute("UPDATE classes SET version = %s, audience = %s, ended = %s, "
                   "updated = now(), state = %s WHERE code = %s",
                   (state.version, state.audience, state.ended, Jsonb(state.to_dict()),
                    state.code))
        db.execute("SELECT pg_notify(%s, %s)",
                   (CHANNEL, f"{state.code}:{state.version}:{state.audience}"))

    async def start(self, teacher: str) -> ClassSession:
        return self._held(await self._off_loop(self._start_kept, teacher))

    def _start_kept(self, teacher: str) -> dict:
        """In a thread: the stored state of the class `teacher` teaches, made if none is open."""
        from psycopg.types.json import Jsonb

        with self._transaction() as db:
            lock(db, Lock.CLASS_START)
            # a class idle for longer than the idle time ends, as one machine's would
            # (`updated` then says when it ended: its retention counts from there)
            db.execute("UPDATE classes SET ended = true, updated = now(), state = "
                       "jsonb_set(state, '{ended}', 'true') WHERE NOT ended AND "
                       "updated < now() - make_interval(secs => %s)",
                       (self.idle_seconds,))
            mine = db.execute("SELECT state FROM classes WHERE teacher = %s AND NOT ended "
                              "LIMIT 1", (teacher,)).fetchone()
            if mine is not None:  # one class per teacher's browser: starting again returns it
                return mine[0]
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
                    return state.to_dict()

    async def end(self, session: ClassSession) -> None:
        await self.change(session, lambda s: s.end())
        self.sessions.pop(session.code, None)

    # ---- the way in --------------------------------------------------------------------------

    async def get(self, code: str, address: str = "", client: str = "",
                  join: bool = True) -> ClassSession:
        code = code.upper()
        if not CODE_PATTERN.fullmatch(code):
            return await enter(self, None, code, address, client, join)
        if code not in self.sessions and not self.wrong_codes.guessing(address):
            # another process's class: held here from now on (a guesser past its count is
            # refused without asking the table)
            data = await self._off_loop(self._stored, code)
            if data is not None:
                self._held(data)
        return await enter(self, self.sessions.get(code), code, address, client, join)

    async def teaching(self, code: str, client: str, address: str = "") -> ClassSession:
        return require_teacher(await self.get(code, address, client, join=False), client)

    def _stored(self, code: str) -> dict | None:
        """In a thread: the open class `code` as its row has it."""
        with self._transaction() as db:
            row = db.execute("SELECT state FROM classes WHERE code = %s AND NOT ended",
                             (code,)).fetchone()
        return None if row is None else row[0]

    def _held(self, data: dict) -> ClassSession:
        """The session of the stored state `data`, held by this process (its streams wait on
        it)."""
        state = ClassState.from_dict(data)
        session = self.sessions.get(state.code)
        if session is None:
            session = self.sessions[state.code] = ClassSession(state)
        else:
            self._publish(session, state)
        return session

    # ---- streams: this process's own ------------------------------------------------------------


    # ---- what other processes' classes say ------------------------------------------------------

    def member_of(self, client: str) -> str | None:
        if not is_browser(client):  # an address is never a member
            return None
        with self._transaction() as db:
            # members keyed by client; a row of the release before holds them as a list
            row = db.execute("SELECT code FROM classes WHERE NOT ended AND (state->'members' ? "
                             "%s OR state->'members' @> jsonb_build_array(jsonb_build_object("
                             "'client', %s::text))) LIMIT 1", (client, client)).fetchone()
        return None if row is None else row[0]

    def people_at(self, address: str) -> int:
        with self._transaction() as db:
            rows = db.execute("SELECT state->'at_address'->>%s FROM classes WHERE NOT ended "
                              "AND state->>'shared_at' = %s", (address, address)).fetchall()
        shared = sum(int(r[0] or 0) for r in rows)
        return max(self.people_per_address, shared)

    async def open_classes(self) -> list[tuple[ClassState, int]]:
        """Every open class, from the table, with its followers: this process's own as they
        are now, every other live process's as it last reported them (`_report_followers`)."""
        rows = await self._off_loop(self._open_rows)
        out = []
        for data, elsewhere in rows:
            state = ClassState.from_dict(data)
            held = self.sessions.get(state.code)
            out.append((state, int(elsewhere) + (len(held.followers) if held else 0)))
        return out

    def _open_rows(self) -> list[tuple[dict, int]]:
        with self._transaction() as db:
            return db.execute(
                "SELECT c.state, COALESCE((SELECT SUM(f.followers) FROM class_followers f "
                "WHERE f.code = c.code AND f.process <> %s AND f.seen > now() - "
                "make_interval(secs => %s)), 0) FROM classes c WHERE NOT c.ended "
                "ORDER BY (c.state->>'created')::float",
                (self.process, FOLLOWERS_SEEN_S)).fetchall()

    async def _report_followers(self) -> None:
        """Until cancelled: this process's followers per class, written to `class_followers`
        when they moved, and again now and then so the rows stay seen."""
        loop = asyncio.get_running_loop()
        told, at = None, 0.0
        while True:
            counts = {code: len(s.followers) for code, s in self.sessions.items()
                      if s.followers and not s.ended}
            if counts != told or loop.time() - at >= FOLLOWERS_KEEP_S:
                try:
                    await self._off_loop(self._write_followers, counts)
                    told, at = counts, loop.time()
                except Exception:  # noqa: BLE001 - the database away: tried again next time
                    log.debug("could not report the followers", exc_info=True)
            await asyncio.sleep(FOLLOWERS_EVERY_S)

    def _write_followers(self, counts: dict[str, int]) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM class_followers WHERE process = %s OR seen < now() - "
                       "make_interval(secs => %s)", (self.process, 3600))
            for code, followers in counts.items():
                db.execute("INSERT INTO class_followers (process, code, followers) "
                           "VALUES (%s, %s, %s)", (self.process, code, followers))

    # ---- hearing of other processes' changes -----------------------------------------------------

    async def listen(self) -> None:
        """Until cancelled: every class change any web process makes, applied to the classes
        this process holds (read once from the table), waking their streams. A lost
        connection is made again, and every held class read again (a change may have been
        missed meanwhile)."""
        import psycopg

        reporting = asyncio.create_task(self._report_followers())
        pruning = asyncio.create_task(self._prune_now_and_then())
        try:
            await self._listen(psycopg)
        finally:
            reporting.cancel()
            pruning.cancel()

    # ---- retention of ended classes ------------------------------------------------------------

    def prune_ended(self) -> int | None:
        """In a thread: delete up to PRUNE_BATCH classes that ended more than the retention
        ago (their row's last change: an ended class changes no more), with their rows in
        `class_followers`. Never an open class, however old; never a run (the runs sent to a
        teacher are their senders', bounded by the store). How many were deleted; None when
        another process was pruning (or retention is 0: kept for ever)."""
        if self.retention_days <= 0:
            return None
        with self._transaction() as db:
            if not lock(db, Lock.PRUNE_CLASSES, wait=False):
                return None
            gone = [code for (code,) in db.execute(
                "DELETE FROM classes WHERE code IN (SELECT code FROM classes WHERE ended AND "
                "updated < now() - make_interval(secs => %s) ORDER BY updated LIMIT %s) "
                "RETURNING code", (self.retention_days * 86400, PRUNE_BATCH)).fetchall()]
            if gone:
                db.execute("DELETE FROM class_followers WHERE code = ANY(%s)", (gone,))
        if gone:
            log.info("deleted %d classes ended more than %g days ago", len(gone),
                     self.retention_days)
        return len(gone)

    async def _prune_now_and_then(self) -> None:
        """Until cancelled: `prune_ended` at start and every PRUNE_EVERY_S, batch after batch
        while batches come back full."""
        while self.retention_days > 0:
            try:
                gone = await self._off_loop(self.prune_ended)
            except Exception:  # noqa: BLE001 - the database away: tried again in a minute
                log.debug("could not delete the long-ended classes", exc_info=True)
                await asyncio.sleep(60.0)
                continue
            await asyncio.sleep(1.0 if gone == PRUNE_BATCH else PRUNE_EVERY_S)

    async def _listen(self, psycopg) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self.database.url, autocommit=True,
                        connect_timeout=CONNECT_S) as conn:
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
            self._publish(session, ClassState.from_dict(data))  # wakes its streams
            if session.ended:  # its streams, woken, see it ended; nothing here holds it more
                self.sessions.pop(session.code, None)

    def _states(self, codes: list[str]) -> list[dict]:
        with self._transaction() as db:
            return [r[0] for r in db.execute("SELECT state FROM classes WHERE code = ANY(%s)",
                                             (codes,)).fetchall()]
