"""A class as one web process serves it: `ClassSession` holds the class's stored state
(`ClassState`, state.py) and what only this process knows: its open event streams, who follows
through them, and the wake-ups they wait on.

Every change to the state goes through `apply` (a classroom's `change` calls it), or arrives
whole through `replace` (a shared classroom heard another process's change); both wake the
streams by what moved: `version` (every reader), `audience` (the teacher only), a member
removed (its own streams end), the class ended. A stream sends the whole state its reader may
see, with the reader's mark as the event id; a browser that reconnects with `Last-Event-ID`
gets the newest state at once if it is newer: nothing is replayed.

Everything here runs on the server's event loop (the class routes and their dependencies are
`async def`), so it needs no lock."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TypeVar

from .state import (
    STREAMS_IN_ALL,
    STREAMS_PER_CLASS,
    STREAMS_PER_CLIENT,
    ClassError,
    ClassState,
    per_address_limit,
)

__all__ = ["ClassSession"]

T = TypeVar("T")


class ClassSession:
    def __init__(self, state: ClassState) -> None:
        self.state = state
        self.touched = time.monotonic()  # for idle expiry: this process's clock
        self.followers: dict[str, int] = {}  # following student -> its streams
        self.streams: dict[str, int] = {}  # client -> open event streams
        self.address_streams: dict[str, int] = {}
        # how often the followers' count moved: each process's own (its own streams), sent
        # to the teacher apart from the state's marks
        self.followed = 0
        # students' snapshots as JSON text for this version, by the answer chosen
        self._texts: dict = {}
        self._texts_version = -1
        self._changed = asyncio.Event()
        self._teacher_changed = asyncio.Event()

    # the state's names the routes read most
    @property
    def code(self) -> str:
        return self.state.code

    @property
    def teacher(self) -> str:
        return self.state.teacher

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def ended(self) -> bool:
        return self.state.ended

    # ---- changes ---------------------------------------------------------------------------

    def apply(self, act: Callable[[ClassState], T]) -> T:
        """`act(state)`, then the streams woken by what it changed (also when it refused: a
        refusal may count, as a browser turned away does for the teacher's hint)."""
        before = self._marks()
        try:
            return act(self.state)
        finally:
            self._wake(before)

    def replace(self, state: ClassState) -> None:
        """Take `state` as this class's (read from where it is kept), waking by what moved."""
        before = self._marks()
        self.state = state
        self._texts = {}  # the same version may come back with other contents (a rollback)
        self._wake(before)

    def _marks(self) -> tuple:
        s = self.state
        return s.version, s.ended, len(s.removed), s.audience

    def _wake(self, before: tuple) -> None:
        after = self._marks()
        if after == before:
            return
        self.touched = time.monotonic()
        if after[:3] != before[:3]:
            # every reader: a new version, the end, or a member removed (whose streams see
            # they are barred and end); not for a count only the teacher sees, so a hundred
            # students joining is not a hundred times a hundred events
            woken, self._changed = self._changed, asyncio.Event()
            woken.set()
        woken, self._teacher_changed = self._teacher_changed, asyncio.Event()
        woken.set()

    def wake_all(self) -> None:
        """Every stream looks again (the state was put back after a failed write)."""
        for name in ("_changed", "_teacher_changed"):
            woken = getattr(self, name)
            setattr(self, name, asyncio.Event())
            woken.set()

    # ---- streams ---------------------------------------------------------------------------

    def mark(self, client: str) -> int:
        """The event id of what `client` sees, the same on every web process: students see
        `version`; the teacher also sees the tally and who joined (`audience`). Both only
        grow. The followers' count is each process's own: a teacher's stream watches it apart
        (`changed`), and sends it with the same id."""
        return self.state.version + (self.state.audience if client == self.teacher else 0)

    def barred(self, client: str) -> bool:
        return self.state.barred(client)

    def open_stream(self, client: str, following: bool, in_all: int,
                    address: str = "") -> None:
        """Count a reader's event stream in (ClassError 429 past the caps). The teacher's tabs
        are not counted against their address: the students behind it may use its share."""
        self.state.require_member(client)
        if client == self.teacher:
            address = ""
        if self.streams.get(client, 0) >= STREAMS_PER_CLIENT:
            raise ClassError(429, f"this browser has {STREAMS_PER_CLIENT} pages following this "
                                  "class already: close one")
        people = self.state.people_at(address) if address else 0
        if address and self.address_streams.get(address, 0) >= STREAMS_PER_CLIENT * people:
            raise ClassError(429, per_address_limit(people, "pages following this class"))
        if sum(self.streams.values()) >= STREAMS_PER_CLASS or in_all >= STREAMS_IN_ALL:
            raise ClassError(429, "this class (or this server) has as many followers as it "
                                  "can serve")
        if address:  # counted only once every cap has let it in: close_stream undoes it
            self.address_streams[address] = self.address_streams.get(address, 0) + 1
        self.streams[client] = self.streams.get(client, 0) + 1
        if following:
            self._follow(client, +1)

    def close_stream(self, client: str, following: bool, address: str = "") -> None:
        if client == self.teacher:
            address = ""  # as open_stream counted it
        if address:
            _count_down(self.address_streams, address)
        _count_down(self.streams, client)
        if following:
            self._follow(client, -1)

    def _follow(self, client: str, step: int) -> None:
        """Followers are people (client keys), not tabs: the count changes only when one
        starts or stops following."""
        before = len(self.followers)
        count = self.followers.get(client, 0) + step
        if count > 0:
            self.followers[client] = count
        else:
            self.followers.pop(client, None)
        if len(self.followers) != before:
            self.followed += 1
            self.touched = time.monotonic()
            woken, self._teacher_changed = self._teacher_changed, asyncio.Event()
            woken.set()

    # ---- what a reader sees ----------------------------------------------------------------

    def snapshot(self, client: str) -> dict:
        return self.state.snapshot(client, followers=len(self.followers))

    def roster(self, teacher_address: str = "") -> dict:
        return self.state.roster(teacher_address, self.streams)

    def snapshot_text(self, client: str) -> str:
        """`snapshot(client)` as JSON text, for a stream. A change reaches every follower, so a
        student's text is made once per version (and per answer chosen: at most a dozen) and
        shared; only its own `me` is put in front. The teacher's is made for the teacher."""
        if client == self.teacher:
            return json.dumps(self.snapshot(client))
        state = self.state
        mine = state.answers.get(client) if state.question is not None else None
        if self._texts_version != state.version:
            self._texts, self._texts_version = {}, state.version
        shared = self._texts.get(mine)
        if shared is None:
            seen = self.snapshot(client)
            seen.pop("me", None)
            shared = self._texts[mine] = json.dumps(seen)
        member = state.members.get(client)
        if member is None:
            return shared
        me = json.dumps({"name": member.name, "alias": member.alias})
        return '{"me": ' + me + ", " + shared[1:]

    async def changed(self, client: str, after: int, timeout: float,
                      followed: int = -1) -> bool:
        """Wait until `client`'s mark is past `after`, or for the teacher the followers'
        count has moved from `followed` (True), or `timeout` passes (False); at once if the
        class ended or the teacher removed `client`."""
        teacher = client == self.teacher
        while self.mark(client) <= after and not (teacher and self.followed != followed) and \
                not self.ended and not self.barred(client):
            event = self._teacher_changed if teacher else self._changed
            try:
                # asyncio.timeout, not wait_for: a change wakes every follower at once, and
                # wait_for makes each of them a task of its own to wait in
                async with asyncio.timeout(timeout):
                    await event.wait()
            except TimeoutError:
                return False
        return True


def _count_down(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
