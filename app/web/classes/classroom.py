"""The classroom seam: `Classroom`, what the routes may ask of the classes, as a Protocol (like
the run queue's `RunQueue`). Two implementations pass one contract suite
(tests/web/classes/test_classroom_contract.py): `InProcessClassroom` (in_process.py: the
classes of one web process, in memory) and `SharedClassroom` (shared.py: every web process's,
kept in PostgreSQL). app.py picks one; nothing else names them.

A class session is a short code (`/c/CODE`), the teacher (the browser that started it, by its
client cookie) and one state (`ClassState`, state.py); each process serves it through its own
`ClassSession` (session.py), which holds the streams. Membership is also a right: a member of
an open class may run code without the server's token (`member_of`, asked by auth.py). Whose a
run is, is the run queue's to say (`RunQueue.started_by`), not the classroom's.

What the class routes ask (`start`, `get`, `teaching`, `change`, `end`) is `async`: the shared
classroom asks PostgreSQL in threads of its own, never on the event loop, so that a database
that is slow or away holds no other page of the process (issue 39). The sessions themselves
are only ever touched on the loop.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Protocol, TypeVar

from app.web.client_keys import is_browser

from .session import ClassSession
from .state import CODE_ALPHABET, CODE_LENGTH, ClassError, ClassState

__all__ = ["Classroom", "ProcessStreams", "enter", "new_code", "require_teacher"]

T = TypeVar("T")


class Classroom(Protocol):
    async def start(self, teacher: str) -> ClassSession:
        """A new class taught by the browser `teacher` (the one it teaches already, if any;
        429 past the server's number of classes)."""

    async def get(self, code: str, address: str = "", client: str = "",
                  join: bool = True) -> ClassSession:
        """The class with this code; a browser (`client`, a cookie's key) new to it joins
        unless `join` is False: refused if the teacher removed it (403) or its address is full
        (429). No such class: 404; past the wrong codes an address (or the server) may try in
        a minute: 429, except for a browser already in the class."""

    async def teaching(self, code: str, client: str, address: str = "") -> ClassSession:
        """The class as its teacher acts in it: 403 for anyone else, 409 once it ended."""

    async def change(self, session: ClassSession, act: Callable[[ClassState], T]) -> T:
        """`act(state)` on the class's state, kept (and told to every process that serves the
        class) also when `act` refused with a count that changed; what `act` returned."""

    async def end(self, session: ClassSession) -> None:
        """End the class: its streams end, its members' right to run code ends."""

    def member_of(self, client: str) -> str | None:
        """The code of an open class `client` is a member of (not its teacher, not removed),
        or None. Read from request threads too."""

    def people_at(self, address: str) -> int:
        """How many people `address` stands for in the run queue: the server's setting, or
        its members in open classes whose room shares that address, if more. Read from the
        queue's threads."""

    def open_stream(self, session: ClassSession, client: str, following: bool,
                    address: str = "") -> None:
        """Count an event stream in (429 past a browser's, an address's, the class's or the
        server's cap)."""

    def close_stream(self, session: ClassSession, client: str, following: bool,
                     address: str = "") -> None:
        """Count it out again (the stream ended)."""

    async def open_classes(self) -> list[tuple[ClassState, int]]:
        """Every open class, oldest first, with how many people follow it (over every web
        process that serves it): the admin page's list (admin/overview.py)."""

    async def listen(self) -> None:
        """Until cancelled, hear what other processes changed (returns at once where no other
        process shares the classes)."""


class ProcessStreams:
    """This process's event streams over all its classes, counted for the server-wide cap
    (the same for both classrooms: streams are each process's own)."""

    def __init__(self) -> None:
        self.open_streams = 0
        # of those, the pages following a teacher (not the teacher's own): the metrics' count
        self.following_streams = 0

    def open_stream(self, session: ClassSession, client: str, following: bool,
                    address: str = "") -> None:
        session.open_stream(client, following, self.open_streams, address)
        self.open_streams += 1
        self.following_streams += following

    def close_stream(self, session: ClassSession, client: str, following: bool,
                     address: str = "") -> None:
        session.close_stream(client, following, address)
        self.open_streams -= 1
        self.following_streams -= following


def require_teacher(session: ClassSession, client: str) -> ClassSession:
    """`session`, if `client` teaches it and it is still open."""
    if session.teacher != client:
        raise ClassError(403, "only the teacher who started this class can do that",
                         "not_the_teacher")
    if session.ended:
        raise ClassError(409, "this class has ended", "class_ended")
    return session


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


async def enter(classroom, session: ClassSession | None, code: str, address: str,
                client: str, join: bool) -> ClassSession:
    """The way into a class, the same for both classrooms: `session` (None: no class of that
    code), behind the wrong-code count (`WrongCodes`); a browser new to it joins through the
    classroom's `change` unless `join` is False or `client` is no browser's cookie (a program,
    or a first page load, reads the class without joining: an address standing in for a
    person would take a member's place)."""
    member = session is not None and bool(client) and session.state.knows(client)
    classroom.wrong_codes.check(address, member)
    if session is None:
        classroom.wrong_codes.miss(address)
        raise ClassError(404, f"there is no class {code[:12]!r} here: check the code, or ask "
                              "the teacher for the link", "no_class")
    if client and join and is_browser(client) and not session.state.knows(client):
        await classroom.change(session, lambda s: s.admit(client, address))
    return session
