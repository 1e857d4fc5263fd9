"""The shared mode's database has one owner, app/web/store/database.py (issue 33): read from the
source, no database needed. No other module of the app reaches into a private member of the
Database or of a run store on another object (a private connect was once called from three
other files), creates or alters a table in PostgreSQL, takes an advisory lock by hand, or
writes a lock key's number; and each rule fails when such a line is added, since a rule that
cannot fail would prove nothing."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

from app.web.store.database import Database, Lock
from app.web.store.postgres import PostgresRunStore
from app.web.store.sqlite import RunStore

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "app"
OWNER = APP / "web" / "store" / "database.py"
# the one-machine store's SQLite file is another database, whose one owner is its store
SQLITE = APP / "web" / "store" / "sqlite.py"

DDL = re.compile(r"\b(CREATE|ALTER|DROP)\s+(TABLE|INDEX)\b", re.IGNORECASE)
ADVISORY = re.compile(r"pg_(try_)?advisory", re.IGNORECASE)
LOCK_PREFIX = 0x6167_6C61_62  # every Lock key is this, then one byte


def _private_members() -> set[str]:
    """The private methods and attributes of the Database and the run stores: those defined
    on the classes, and those their methods set on `self`."""
    names: set[str] = set()
    for cls in (Database, PostgresRunStore, RunStore):
        names |= {n for n in vars(cls) if n.startswith("_") and not n.startswith("__")}
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        names |= {node.attr for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "self" and node.attr.startswith("_")
                  and not node.attr.startswith("__")}
    return names


PRIVATE = _private_members()


def violations(path: Path, text: str) -> list[str]:
    """What `path` (its source `text`) does that only the Database may."""
    found = []
    if path != OWNER:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{path}:{node.lineno}: .{node.attr} of another object")
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("database") \
                    and any(a.name.startswith("_") for a in node.names):
                found.append(f"{path}:{node.lineno}: a private name of database.py imported")
            if isinstance(node, ast.Constant) and isinstance(node.value, int) and \
                    not isinstance(node.value, bool) and node.value >> 8 == LOCK_PREFIX:
                found.append(f"{path}:{node.lineno}: an advisory lock's key by number")
        for number, line in enumerate(text.splitlines(), 1):
            if path != SQLITE and DDL.search(line):
                found.append(f"{path}:{number}: a table made or changed: {line.strip()}")
            if ADVISORY.search(line):
                found.append(f"{path}:{number}: an advisory lock taken: {line.strip()}")
    return found


def test_only_the_database_reaches_its_pool_makes_tables_and_takes_locks():
    found = [v for path in sorted(APP.rglob("*.py")) for v in violations(path, path.read_text())]
    assert not found, "\n".join(found)


def test_the_private_members_are_found():
    """The rule knows the members it guards (were the classes' source not read, it would
    pass with nothing to guard)."""
    assert {"_pool", "_opened", "_migrate", "_prune", "_parse", "_connect"} <= PRIVATE


@pytest.mark.parametrize("module, line", [
    ("app/web/runs/shared_queue.py", "store._connect()"),  # the sqlite store's, still
    ("app/web/runs/upload_host.py", "self.store.database._pool.connection()"),
    ("app/web/classes/shared.py", "self.store._prune(db, keep)"),
    ("app/web/runs/shared_queue.py", "from app.web.store.database import _first_line"),
    ("app/web/store/postgres.py", "db.execute('CREATE TABLE IF NOT EXISTS notes (n INT)')"),
    ("app/web/classes/shared.py", "db.execute('alter table classes add column x int')"),
    ("app/web/runs/upload_host.py", "db.execute('SELECT pg_try_advisory_xact_lock(7)')"),
    ("app/web/runs/shared_queue.py", "_QUEUE_LOCK = 0x6167_6C61_6203"),
])
def test_a_line_only_the_database_may_write_breaks_the_rule(module, line):
    path = ROOT / module
    text = path.read_text() + f"\n\ndef _forbidden(self, store, db, keep):\n    {line}\n"
    assert violations(path, text), line


def test_the_lock_keys_are_those_the_releases_before_took():
    """Processes of this release and of the one before it agree on every lock while a course
    is restarted one by one; the two schema keys retired with the one SCHEMA lock stay
    unused."""
    assert {k.name: k.value for k in Lock} == {
        "SCHEMA": 0x6167_6C61_6201, "PRUNE": 0x6167_6C61_6202, "QUEUE": 0x6167_6C61_6203,
        "CLASS_START": 0x6167_6C61_6206, "LOOK_FOR_DEAD": 0x6167_6C61_6207,
        # new in this release (the ended classes' prune): a key no release before took
        "PRUNE_CLASSES": 0x6167_6C61_6208}
