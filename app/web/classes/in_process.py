"""`InProcessClassroom`: the `Classroom` (classroom.py) of one web process, its classes held in
memory, bounded in number and idle time. A restart ends every class.

Everything here runs on the server's event loop (the class routes are `async def`), so the
classes need no lock; the exceptions, `people_at` (read by the run queue's threads) and
`member_of` (by the pages' threads: may this browser run code?), only read, taking the list of
sessions at once. Torch-free, and it never sees user code: a view is a path and a query."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from app.web.client_keys import is_browser
from app.web.settings import default_of

from .classroom import ProcessStreams, enter, new_code, require_teacher
from .session import ClassSession
from .state import CODE_PATTERN, ClassError, ClassState
from .wrong_codes import WrongCodes

__all__ = ["InProcessClassroom"]

T = TypeVar("T")


class InProcessClassroom(ProcessStreams):
    """Every open class session of this server process."""

    def __init__(self, max_sessions: int = default_of("max_classes"),
                 idle_hours: float = 12,
                 people_per_address: int = default_of("per_address_people")) -> None:
        super().__init__()
        self.max_sessions = max_sessions
        self.people_per_address = people_per_address
        self.idle_seconds = idle_hours * 3600
        self.sessions: dict[str, ClassSession] = {}
        self.wrong_codes = WrongCodes()

    async def change(self, session: ClassSession, act: Callable[[ClassState], T]) -> T:
        return session.apply(act)

    def open_teachers(self) -> list[str]:
        """The client keys of open classes' teachers (the run store keeps their runs)."""
        return [s.teacher for s in list(self.sessions.values()) if not s.ended]

    async def start(self, teacher: str) -> ClassSession:
        self._expire()
        mine = [s for s in self.sessions.values() if s.teacher == teacher and not s.ended]
        if mine:
            return mine[0]  # one class per teacher's browser: starting again returns it
        if len(self.sessions) >= self.max_sessions:
            raise ClassError(429, f"this server has {self.max_sessions} class sessions open; "
                                  "end one (or wait for idle ones to expire) and try again")
        code = self._new_code()
        session = self.sessions[code] = ClassSession(
            ClassState(code=code, teacher=teacher, people=self.people_per_address))
        return session

    async def get(self, code: str, address: str = "", client: str = "",
                  join: bool = True) -> ClassSession:
        code = code.upper()
        session = self.sessions.get(code) if CODE_PATTERN.fullmatch(code) else None
        return await enter(self, session, code, address, client, join)

    async def teaching(self, code: str, client: str, address: str = "") -> ClassSession:
        # not joined first: someone else's browser is told it is not the teacher, not that
        # its address is full
        return require_teacher(await self.get(code, address, client, join=False), client)

    def people_at(self, address: str) -> int:
        shared = sum(s.state.at_address.get(address, 0) for s in list(self.sessions.values())
                     if s.state.shared_at == address and not s.ended)
        return max(self.people_per_address, shared)

    def member_of(self, client: str) -> str | None:
        if not is_browser(client):  # an address is never a member
            return None
        for session in list(self.sessions.values()):
            if not session.ended and client in session.state.members:
                return session.code
        return None

    async def end(self, session: ClassSession) -> None:
        self._end(session)

    def _end(self, session: ClassSession) -> None:
        session.apply(lambda s: s.end())
        self.sessions.pop(session.code, None)


    async def open_classes(self) -> list[tuple[ClassState, int]]:
        self._expire()
        held = sorted((s for s in self.sessions.values() if not s.ended),
                      key=lambda s: s.state.created)
        return [(s.state, len(s.followers)) for s in held]

    async def listen(self) -> None:
        """No other process shares these classes: nothing to hear."""

    def _new_code(self) -> str:
        while True:
            code = new_code()
            if code not in self.sessions:
                return code

    def _expire(self) -> None:
        now = time.monotonic()
        for s in list(self.sessions.values()):
            if now - s.touched > self.idle_seconds and not s.followers:
                self._end(s)
