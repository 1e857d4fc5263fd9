"""The shared mode's Database (app/web/store/database.py) on a real PostgreSQL: a database made
by the releases before the schema had a version is adopted as version 1 with everything in it;
processes opening one database at once apply each step once; a later step is applied to a
database already at version 1."""

from __future__ import annotations

import gzip
import json
import threading

import psycopg
import pytest

from app.web.store import database as database_module
from app.web.store.database import STEPS, Database
from app.web.store.postgres import PostgresRunStore
from tests.postgres import fresh_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(postgres_url):
    return fresh_database(postgres_url)


def _applied(url: str) -> list[tuple[int, int]]:
    """(version, how many times it was recorded), every step recorded."""
    with psycopg.connect(url) as db:
        return db.execute("SELECT version, COUNT(*) FROM autograd_lab_schema "
                          "GROUP BY version ORDER BY version").fetchall()


def _all_applied_once(extra: int = 0) -> list[tuple[int, int]]:
    return [(n, 1) for n in range(1, len(STEPS) + extra + 1)]


def test_a_database_of_the_releases_before_is_adopted_as_version_1_without_loss(url):
    doc = {"script": {"name": "old.py", "source": "print(1)\n"}, "events": [],
           "run": {"id": "old", "link": "/runs/old"}}
    with psycopg.connect(url) as db:  # what the release before left: its tables, no version
        db.execute(STEPS[0])
        db.execute("INSERT INTO runs (id, created, name, size, doc) VALUES "
                   "('old', 1.0, 'old.py', 10, %s)", (gzip.compress(json.dumps(doc).encode()),))
        db.execute("INSERT INTO run_heads (id, head) VALUES ('old', %s)",
                   (json.dumps({"name": "old.py"}),))
        db.execute("INSERT INTO uploads (id, client, address, name, source, device, "
                   "time_limit, state) VALUES ('old', 'alice', '', 'old.py', 'print(1)\n', "
                   "'cpu', 10, 'done')")
        db.execute("INSERT INTO classes (code, teacher, version, audience, state) VALUES "
                   "('ABCDEF', 'teacher', 3, 1, '{}')")
        db.execute("INSERT INTO server_secrets (name, value) VALUES ('cookie-signing-key', "
                   "'kept')")
    database = Database(url, pool_size=2).open()
    store = PostgresRunStore(database)
    try:
        # adopted as version 1, then brought to this release's version
        assert database.schema_version() == len(STEPS) and _applied(url) == _all_applied_once()
        assert store.get("old")["script"]["name"] == "old.py" and len(store) == 1
        assert store.head("old") == {"name": "old.py"}
        assert store.secret("cookie-signing-key") == b"kept"
        with database.transaction() as db:
            assert db.execute("SELECT client FROM uploads WHERE id = 'old'").fetchone() == \
                ("alice",)
            assert db.execute("SELECT version FROM classes").fetchone() == (3,)
    finally:
        database.close()
    again = Database(url, pool_size=1).open()  # a restart: nothing applied a second time
    try:
        assert again.schema_version() == len(STEPS) and _applied(url) == _all_applied_once()
    finally:
        again.close()


def test_processes_opening_one_database_at_once_apply_each_step_once(url, monkeypatch):
    # a second step that fails if applied twice (no IF NOT EXISTS), and counts its runs
    monkeypatch.setattr(database_module, "STEPS", (*STEPS, "CREATE TABLE step_two (n INTEGER); "
                                                           "INSERT INTO step_two VALUES (1)"))
    opened: list[Database] = []
    failed: list[BaseException] = []
    together = threading.Barrier(6)

    def start() -> None:  # a web process or an upload host starting with the others
        made = Database(url, pool_size=1)
        opened.append(made)
        together.wait()
        try:
            made.open()
        except BaseException as exc:  # noqa: BLE001 - said below
            failed.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert not failed, failed
        assert _applied(url) == _all_applied_once(extra=1)
        assert all(d.schema_version() == len(STEPS) + 1 for d in opened)
        with opened[0].transaction() as db:
            assert db.execute("SELECT COUNT(*) FROM step_two").fetchone() == (1,)
    finally:
        for made in opened:
            made.close()


def test_a_later_step_is_applied_to_a_database_of_the_release_before(url, monkeypatch):
    first = Database(url, pool_size=1).open()  # this release
    first.close()
    store = PostgresRunStore(url, pool_size=1)
    store.keep({"script": {"name": "kept.py", "source": ""}, "events": []}, "r1")
    store.close()
    monkeypatch.setattr(database_module, "STEPS",  # the next release, with a step of its own
                        (*STEPS, "ALTER TABLE runs ADD COLUMN note TEXT"))
    later = PostgresRunStore(url, pool_size=1)
    try:
        later.open()
        assert later.database.schema_version() == len(STEPS) + 1
        assert _applied(url) == _all_applied_once(extra=1)
        assert later.get("r1")["script"]["name"] == "kept.py"
        with later.database.transaction() as db:
            assert db.execute("SELECT note FROM runs WHERE id = 'r1'").fetchone() == (None,)
    finally:
        later.close()


def test_the_line_tables_of_procrastinate_are_made_once(url):
    """Procrastinate's own tables, beside ours: made by whoever asks first, then left."""
    pytest.importorskip("procrastinate")
    database = Database(url, pool_size=2)
    try:
        database.procrastinate_schema()
        database.procrastinate_schema()  # another process, later: finds them made
        with database.transaction() as db:
            assert db.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL") \
                .fetchone() == (True,)
        assert database.schema_version() == len(STEPS)
    finally:
        database.close()
