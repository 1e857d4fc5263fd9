"""An ended class is kept `ended_class_retention_days` after its last change, then deleted
from every table (classes/shared.py, `prune_ended`); an open class, however old, and one ended
recently stay whole. On one machine an ended class is forgotten at once (in_process.py): there
is nothing of it to keep.

The age of a class is its row's `updated`: the tests set it back, as the days would."""

from __future__ import annotations

import pytest

from app.web.classes.in_process import InProcessClassroom
from tests.web.classes.test_classroom_contract import TEACHER, Blocking, refused


def _mentions(db, code: str) -> dict[str, int]:
    """Every table of the database's public schema with rows whose text holds `code`."""
    tables = [t for (t,) in db.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
        "AND table_type = 'BASE TABLE'").fetchall()]
    found = {}
    for table in tables:
        n = db.execute(f'SELECT COUNT(*) FROM "{table}" t WHERE t::text LIKE %s',
                       (f"%{code}%",)).fetchone()[0]
        if n:
            found[table] = n
    return found


def _a_class_with_everything(room, teacher: str) -> str:
    """A class with a member, a question, an answer and followers' counts on two processes."""
    session = room.start(teacher)
    member = room.get(session.code, "10.0.0.2", f"{teacher}-ann")
    question = room.change(session, lambda s: s.ask("Which?", ["a", "b"], 1))
    room.change(member, lambda s: s.answer(f"{teacher}-ann", question["id"], 0, "10.0.0.2"))
    room.classroom._write_followers({session.code: 3})
    with room.classroom.database.transaction() as db:
        db.execute("INSERT INTO class_followers (process, code, followers) VALUES "
                   "('another-process', %s, 2)", (session.code,))
    return session.code


@pytest.mark.postgres
@pytest.mark.parametrize("retention_days", [30, 0])
def test_a_long_ended_class_is_gone_from_every_table_and_the_others_are_whole(
        postgres_url, retention_days):
    from app.web.classes.shared import SharedClassroom
    from app.web.store.database import Database
    from tests.postgres import fresh_database

    database = Database(fresh_database(postgres_url), pool_size=2).open()
    room = Blocking(SharedClassroom(database, max_sessions=3, people_per_address=4,
                                    retention_days=retention_days))
    try:
        old_open = _a_class_with_everything(room, "cookie:t-open")
        recent = _a_class_with_everything(room, "cookie:t-recent")
        long_ended = _a_class_with_everything(room, "cookie:t-long")
        room.end(room.teaching(recent, "cookie:t-recent"))
        room.end(room.teaching(long_ended, "cookie:t-long"))
        with database.transaction() as db:
            # 31 days since the long-ended class's end, 29 since the recent one's; the open
            # class untouched for 40 days (only starting a class ends idle ones, not pruning)
            for code, days in ((long_ended, 31), (recent, 29), (old_open, 40)):
                db.execute("UPDATE classes SET updated = now() - make_interval(days => %s) "
                           "WHERE code = %s", (days, code))
            before = {code: (_mentions(db, code), db.execute(
                "SELECT state FROM classes WHERE code = %s", (code,)).fetchone()[0])
                for code in (old_open, recent, long_ended)}
        assert before[long_ended][0] == {"classes": 1, "class_followers": 2}

        gone = room.classroom.prune_ended()

        with database.transaction() as db:
            after = {code: (_mentions(db, code), db.execute(
                "SELECT state FROM classes WHERE code = %s", (code,)).fetchone())
                for code in (old_open, recent, long_ended)}
        if retention_days == 0:  # kept for ever
            assert gone is None
            assert after[long_ended][0] == before[long_ended][0]
        else:
            assert gone == 1
            assert after[long_ended] == ({}, None)
        for code in (old_open, recent):  # whole: every row, the state as it was
            assert after[code][0] == before[code][0]
            assert after[code][1][0] == before[code][1]
        # the open class is still a class its member may run code in
        assert room.member_of("cookie:t-open-ann") == old_open
    finally:
        room.close()
        database.close()


@pytest.mark.postgres
def test_an_idle_class_ended_at_start_counts_its_retention_from_then(postgres_url):
    """A class nobody touched for the idle time is ended when a class starts; its retention
    counts from that end, not from its last touch (which was past the retention already)."""
    from app.web.classes.shared import SharedClassroom
    from app.web.store.database import Database
    from tests.postgres import fresh_database

    database = Database(fresh_database(postgres_url), pool_size=2).open()
    room = Blocking(SharedClassroom(database, max_sessions=3, idle_hours=12, retention_days=30))
    try:
        idle = room.start("cookie:t-idle").code
        with database.transaction() as db:
            db.execute("UPDATE classes SET updated = now() - make_interval(days => 45) "
                       "WHERE code = %s", (idle,))
        room.start("cookie:t-new")  # ends the idle class
        assert room.classroom.prune_ended() == 0
        with database.transaction() as db:
            assert db.execute("SELECT ended FROM classes WHERE code = %s",
                              (idle,)).fetchone() == (True,)
    finally:
        room.close()
        database.close()


def test_on_one_machine_an_ended_class_is_forgotten_at_once():
    """The in-process classroom (the SQLite store's mode) keeps classes in memory only: an
    ended class is dropped from it at once, and the store has no table of classes."""
    room = Blocking(InProcessClassroom(max_sessions=3, people_per_address=4))
    try:
        session = room.start(TEACHER)
        room.get(session.code, "10.0.0.2", "cookie:ann")
        room.end(session)
        assert session.code not in room.classroom.sessions
        refused(404, room.get, session.code, "10.0.0.2", "cookie:ann")
    finally:
        room.close()


def test_the_sqlite_store_keeps_no_class(tmp_path):
    import sqlite3

    from app.web.store.sqlite import RunStore

    store = RunStore(tmp_path / "runs.db", 10, 1 << 20, 1 << 20)
    store.open()
    try:
        with sqlite3.connect(tmp_path / "runs.db") as db:
            tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE "
                                               "type = 'table'")}
    finally:
        store.close()
    assert tables and not any("class" in t for t in tables)
