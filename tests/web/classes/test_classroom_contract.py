"""What every classroom must do (app/web/classes/classroom.py, `Classroom`), run against each
implementation: the in-process one and the shared one over a real PostgreSQL. A class is
started, found, joined, taught, changed, refused, ended; its membership is a right to run code
until it ends; a refusal that counts is kept; a change wakes a waiting stream.

To test another implementation, add a factory to IMPLEMENTATIONS: it yields a classroom that
allows 3 classes and 4 people per address.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app.web.classes.classroom import Classroom
from app.web.classes.in_process import InProcessClassroom
from app.web.classes.state import WRONG_CODES_PER_MINUTE, ClassError

TEACHER = "cookie:teacher"
ROOM = "10.0.0.1"


class Blocking:
    """A classroom whose `async` methods (the routes await them) are called here as plain
    ones, each run to its end on an event loop of the test's own, in a thread of its own (the
    browser tests leave Playwright's loop running in the test's thread, and no second loop
    may run beside it there): the contract reads as before."""

    def __init__(self, classroom: Classroom) -> None:
        self.classroom = classroom
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def __getattr__(self, name: str):
        found = getattr(self.classroom, name)
        if not asyncio.iscoroutinefunction(found):
            return found
        return lambda *args, **kwargs: asyncio.run_coroutine_threadsafe(
            found(*args, **kwargs), self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@contextmanager
def in_process() -> Iterator[Classroom]:
    yield InProcessClassroom(max_sessions=3, people_per_address=4)


@contextmanager
def shared(postgres_url: str) -> Iterator[Classroom]:
    from app.web.classes.shared import SharedClassroom
    from app.web.store.database import Database
    from tests.postgres import fresh_database

    database = Database(fresh_database(postgres_url), pool_size=2).open()
    try:
        yield SharedClassroom(database, max_sessions=3, people_per_address=4)
    finally:
        database.close()


@pytest.fixture(params=["in-process", pytest.param("shared", marks=pytest.mark.postgres)])
def room(request) -> Iterator[Classroom]:
    if request.param == "shared":
        made = shared(request.getfixturevalue("postgres_url"))
    else:
        made = in_process()
    with made as classroom:
        blocking = Blocking(classroom)
        try:
            yield blocking
        finally:
            blocking.close()


def refused(status: int, call, *args, **kwargs) -> ClassError:
    with pytest.raises(ClassError) as caught:
        call(*args, **kwargs)
    assert caught.value.status == status, caught.value.detail
    return caught.value


def test_a_teacher_starts_one_class_and_starting_again_returns_it(room):
    session = room.start(TEACHER)
    assert session.teacher == TEACHER and len(session.code) == 6 and session.version == 0
    assert room.start(TEACHER).code == session.code
    assert room.teaching(session.code.lower(), TEACHER, ROOM).code == session.code


def test_the_number_of_open_classes_is_bounded(room):
    for n in range(3):
        room.start(f"cookie:teacher{n}")
    assert "3 class sessions" in refused(429, room.start, "cookie:teacher-too-many").detail


def test_a_browser_joins_an_address_reads_without_joining(room):
    code = room.start(TEACHER).code
    session = room.get(code, "10.0.0.2", "cookie:ann")
    assert "cookie:ann" in session.state.members
    room.get(code, "10.0.0.3", "address:10.0.0.3")  # a program: reads, takes no place
    assert "address:10.0.0.3" not in room.get(code, ROOM, TEACHER).state.members
    assert room.member_of("cookie:ann") == code
    assert room.member_of(TEACHER) is None  # the teacher runs code with the token
    assert room.member_of("address:10.0.0.2") is None
    assert room.member_of("cookie:stranger") is None


def test_no_such_class_and_guessed_codes(room):
    code = room.start(TEACHER).code
    member = room.get(code, "10.0.0.9", "cookie:ann")
    assert refused(404, room.get, "ZZZZZ2", "10.0.0.9", "cookie:guesser").code == "no_class"
    refused(404, room.get, "not a code", "10.0.0.9", "cookie:guesser")
    for _ in range(WRONG_CODES_PER_MINUTE - 2):
        refused(404, room.get, "ZZZZZ2", "10.0.0.9", "cookie:guesser")
    # the address is past its wrong codes: the right code is refused too, for a stranger
    assert refused(429, room.get, code, "10.0.0.9", "cookie:new").code == "too_many_codes"
    assert room.get(code, "10.0.0.9", "cookie:ann").code == member.code  # a member gets in
    assert room.get(code, "10.0.0.10", "cookie:other").code == code  # other addresses too


def test_only_the_teacher_teaches(room):
    code = room.start(TEACHER).code
    assert refused(403, room.teaching, code, "cookie:ann", ROOM).code == "not_the_teacher"
    # not joined by asking: the stranger is told it is not the teacher, and is no member
    assert room.member_of("cookie:ann") is None


def test_a_change_is_kept_and_seen_by_the_next_reader(room):
    session = room.start(TEACHER)
    room.change(session, lambda s: s.show("/scenarios/reused_layer", "k=2"))
    again = room.get(session.code, "10.0.0.2", "cookie:ann")
    assert again.state.view == {"path": "/scenarios/reused_layer", "query": "k=2"}
    assert again.version == 1
    question = room.change(session, lambda s: s.ask("Which?", ["a", "b"], 1))
    room.change(again, lambda s: s.answer("cookie:ann", question["id"], 0, "10.0.0.2"))
    seen = room.teaching(session.code, TEACHER, ROOM).snapshot(TEACHER)
    assert seen["question"]["tally"] == [1, 0] and seen["question"]["answer"] == 1
    student = room.get(session.code, "10.0.0.2", "cookie:ann").snapshot("cookie:ann")
    assert "answer" not in student["question"] and student["question"]["mine"] == 0


def test_a_refused_change_changes_nothing(room):
    session = room.start(TEACHER)
    room.change(session, lambda s: s.ask("Which?", ["a", "b"], 1))
    before = room.teaching(session.code, TEACHER, ROOM).state.to_dict()
    refused(422, room.change, session, lambda s: s.show("https://elsewhere.example/", ""))
    refused(409, room.change, session, lambda s: s.answer(TEACHER, "nope", 0))
    assert room.teaching(session.code, TEACHER, ROOM).state.to_dict() == before


def test_a_refusal_that_counts_is_kept_for_the_teacher(room):
    """The fifth browser from one address is refused (429), and the teacher's page learns that
    someone was turned away: the refusal changed the state, and it is kept."""
    code = room.start(TEACHER).code
    for n in range(4):
        room.get(code, "10.0.0.5", f"cookie:s{n}")
    assert refused(429, room.get, code, "10.0.0.5", "cookie:s4").code == "address_full"
    teaching = room.teaching(code, TEACHER, ROOM)
    assert teaching.snapshot(TEACHER)["turned_away"] == 1
    assert room.people_at("10.0.0.5") == 4
    # the teacher says the room shares that address: the fifth may join, and counts
    room.change(teaching, lambda s: s.share_address("address 1"))
    room.get(code, "10.0.0.5", "cookie:s4")
    room.get(code, "10.0.0.5", "cookie:s5")
    assert room.people_at("10.0.0.5") == 6
    assert room.people_at("10.0.0.6") == 4


def test_a_removed_member_loses_its_right_and_cannot_come_back(room):
    code = room.start(TEACHER).code
    joined = room.get(code, "10.0.0.2", "cookie:ann")
    alias = joined.state.members["cookie:ann"].alias
    room.change(room.teaching(code, TEACHER, ROOM), lambda s: s.remove(alias))
    assert room.member_of("cookie:ann") is None
    assert refused(403, room.get, code, "10.0.0.2", "cookie:ann").code == "removed_from_class"


def test_an_ended_class_is_gone_with_its_rights(room):
    session = room.start(TEACHER)
    room.get(session.code, "10.0.0.2", "cookie:ann")
    room.end(session)
    assert session.ended
    assert room.member_of("cookie:ann") is None
    refused(404, room.get, session.code, "10.0.0.2", "cookie:ann")
    assert room.start(TEACHER).code != session.code  # a new class, not the ended one


def test_streams_are_capped_per_browser_and_counted_out(room):
    session = room.start(TEACHER)
    room.get(session.code, "10.0.0.2", "cookie:ann")
    for _ in range(4):
        room.open_stream(session, "cookie:ann", True, "10.0.0.2")
    refused(429, room.open_stream, session, "cookie:ann", True, "10.0.0.2")
    assert session.snapshot(TEACHER)["followers"] == 1  # people, not tabs
    room.close_stream(session, "cookie:ann", True, "10.0.0.2")
    room.open_stream(session, "cookie:ann", True, "10.0.0.2")
    refused(403, room.open_stream, session, "cookie:stranger", True, "10.0.0.3")


def test_a_change_wakes_a_waiting_stream_and_a_teacher_only_change_does_not(room):
    session = room.start(TEACHER)
    room.get(session.code, "10.0.0.2", "cookie:ann")
    seen = session.mark("cookie:ann")

    async def scenario() -> tuple[bool, bool]:
        # a member joining is the teacher's news only: the student's stream sleeps on
        waiting = asyncio.create_task(session.changed("cookie:ann", seen, 0.5))
        await asyncio.sleep(0.05)
        # on this loop, where the streams wait: a session is only ever touched on its loop
        await room.classroom.get(session.code, "10.0.0.3", "cookie:bob")
        slept = not await waiting
        waiting = asyncio.create_task(session.changed("cookie:ann", seen, 5))
        await asyncio.sleep(0.05)
        await room.classroom.change(session, lambda s: s.show("/", ""))
        return slept, await waiting

    # a loop of its own in a thread: the browser tests leave Playwright's loop running in this
    # thread, and asyncio.run refuses to start beside it (it failed only in the whole suite)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slept, woken = pool.submit(asyncio.run, scenario()).result(timeout=60)
    assert slept and woken


def test_open_classes_lists_each_open_class_with_its_members_and_followers(room):
    """The admin page's list (admin/overview.py): open classes only, oldest first, each with
    its members, who started it, and the people following it now."""
    first = room.start(TEACHER)
    room.change(first, lambda s: s.name_teacher("teacher:ana"))
    second = room.start("cookie:other-teacher")
    room.get(first.code, "10.0.0.2", "cookie:ann")
    room.open_stream(first, "cookie:ann", True, "10.0.0.2")
    listed = room.open_classes()
    assert [state.code for state, _ in listed] == [first.code, second.code]
    (state, followers), (_, none) = listed
    assert list(state.members) == ["cookie:ann"] and state.teacher_name == "teacher:ana"
    assert (followers, none) == (1, 0)
    room.close_stream(first, "cookie:ann", True, "10.0.0.2")
    room.end(second)
    assert [(s.code, n) for s, n in room.open_classes()] == [(first.code, 0)]
