"""Named teachers: tokens of their own, each with a name, beside the server's one token, so a
course with several teachers need not share one secret, and one can be revoked alone
(`autograd-lab teachers add|list|revoke`).

A token is 32 random bytes, shown once when it is made. Only its SHA-256 is kept: a digest of
that much randomness needs no slow hash, and whoever reads the store cannot use what it finds.
A named token does what the server's token does, and is accepted only where the server has a
token (a server without one has no secret to share out).

`TeacherTokens` keeps them in the SQLite file of one machine; `SharedTeacherTokens` in the
shared mode's PostgreSQL (schema step 4), where a revocation reaches every web process. Each
process remembers an answer for `REMEMBER_S`, so a request does not ask the database each time:
a revocation takes effect within that, also on the classes the teacher started: their browser
teaches them no more (deps.py `teacher_session`)."""

from __future__ import annotations

import hashlib
import re
import secrets
import sqlite3
import threading
import time
from contextlib import closing, contextmanager

from app.lru import LRU

__all__ = ["NAME", "REMEMBER_S", "SharedTeacherTokens", "TeacherTokens", "TeacherError",
           "digest"]

NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
REMEMBER_S = 5.0


class TeacherError(ValueError):
    """A name refused, or one that is not there: the message says what to do."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _checked(name: str) -> str:
    if not NAME.fullmatch(name):
        raise TeacherError(f"a teacher's name is 1 to 40 of a-z, 0-9, _ and -, starting with "
                           f"a letter ({name[:40]!r} is not)")
    return name


class _Remembered:
    """Who a digest names, remembered a few seconds in this process (bounded: a flood of
    made-up tokens cannot grow it)."""

    def __init__(self) -> None:
        self._known: LRU[tuple[str | None, float]] = LRU(1024)
        self._lock = threading.Lock()

    def name_of(self, token: str, look_up) -> str | None:
        return self.answer(digest(token), look_up)

    def answer(self, key: str, look_up):
        """`look_up(key)`, or its answer of less than REMEMBER_S ago."""
        now = time.monotonic()
        with self._lock:
            hit = self._known.get(key)
        if hit is not None and now - hit[1] < REMEMBER_S:
            return hit[0]
        name = look_up(key)
        with self._lock:
            self._known.put(key, (name, now))
        return name


class TeacherTokens:
    """Named teachers' tokens in the SQLite file of one machine: the run store's file, whose
    tables its store makes (sqlite.py's `_SCHEMA`, `RunStore.open`). The statements are
    written once, with SQLite's `?`; `SharedTeacherTokens` gives them to PostgreSQL."""

    PLACEHOLDER = "?"

    def __init__(self, store) -> None:
        self.store = store
        self._remembered = _Remembered()

    @contextmanager
    def _transaction(self):
        self.store.open()  # the tables, made once
        with closing(sqlite3.connect(self.store.path, timeout=30)) as db, db:
            yield db

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self.PLACEHOLDER)

    def _run(self, statement: str, values: tuple = ()):
        """A one-statement transaction's cursor, its rows read."""
        with self._transaction() as db:
            cursor = db.execute(self._sql(statement), values)
            # psycopg refuses to fetch from a statement that returns no rows (an UPDATE)
            return cursor.rowcount, cursor.fetchall() if cursor.description else []

    def add(self, name: str) -> str:
        """Make `name`'s token and return it (the only time it is seen)."""
        _checked(name)
        token = secrets.token_urlsafe(32)
        with self._transaction() as db:
            if db.execute(self._sql("SELECT 1 FROM teacher_tokens WHERE name = ? AND revoked "
                                    "IS NULL"), (name,)).fetchone():
                raise TeacherError(f"there is a teacher {name!r} already: revoke it first to "
                                   "give it a new token")
            # a revoked teacher's row is reused: the name comes back with a new token
            db.execute(self._sql("INSERT INTO teacher_tokens (name, digest, created, revoked) "
                                 "VALUES (?, ?, ?, NULL) ON CONFLICT (name) DO UPDATE SET "
                                 "digest = EXCLUDED.digest, created = EXCLUDED.created, "
                                 "revoked = NULL"), (name, digest(token), time.time()))
        return token

    def revoke(self, name: str) -> None:
        done, _ = self._run("UPDATE teacher_tokens SET revoked = ? WHERE name = ? AND "
                            "revoked IS NULL", (time.time(), name))
        if not done:
            raise TeacherError(f"no teacher {name[:40]!r} with a token (`autograd-lab "
                               "teachers list` names them)")

    def listed(self) -> list[dict]:
        _, rows = self._run("SELECT name, created, revoked FROM teacher_tokens ORDER BY name")
        return [{"name": n, "created": c, "revoked": r} for n, c, r in rows]

    def name_of(self, token: str) -> str | None:
        """The name of the teacher whose live token this is, or None."""
        return self._remembered.name_of(token, self._look_up)

    def _look_up(self, key: str) -> str | None:
        _, rows = self._run("SELECT name FROM teacher_tokens WHERE digest = ? AND revoked IS "
                            "NULL", (key,))
        return rows[0][0] if rows else None

    def is_live(self, name: str) -> bool:
        """Has teacher `name` a token that is not revoked? (A class a named teacher started is
        theirs to teach only while it is: deps.py `teacher_session`.)"""
        return bool(self._remembered.answer("name:" + name, self._live))

    def _live(self, key: str) -> bool:
        _, rows = self._run("SELECT 1 FROM teacher_tokens WHERE name = ? AND revoked IS NULL",
                            (key.removeprefix("name:"),))
        return bool(rows)


class SharedTeacherTokens(TeacherTokens):
    """The same in the shared mode's PostgreSQL (`Database`, schema step 4)."""

    PLACEHOLDER = "%s"

    def __init__(self, database) -> None:
        self.database = database
        self._remembered = _Remembered()

    def _transaction(self):
        return self.database.transaction()
