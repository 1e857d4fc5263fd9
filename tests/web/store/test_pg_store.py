"""What the PostgreSQL store adds to the rules every store keeps (test_store.py runs those on
it too): a run stored twice is replaced whole, its old bytes' reader told so; the secrets every
web process shares; a database that cannot be reached said with its address but never its
password; names a script chose stored as they are, never as SQL."""

from __future__ import annotations

import gzip
import json

import pytest

from app.web.store.common import RunGone, StoreUnavailable
from app.web.store.postgres import PostgresRunStore
from tests.postgres import fresh_database
from tests.server import free_port

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(postgres_url):
    return fresh_database(postgres_url)


@pytest.fixture
def store(url):
    made = PostgresRunStore(url, pool_size=2)
    yield made
    made.close()


def _doc(name: str, pad: str = "") -> dict:
    return {"script": {"name": name, "source": "print(1)\n"}, "events": [], "pad": pad}


def test_a_run_stored_twice_is_replaced_whole_and_its_old_readers_are_told(store):
    store.keep(_doc("first.py", "a" * 300_000), "run1")
    old = store.blob("run1")
    pieces = store.chunks(old, size=1024)
    first = next(pieces)
    # the same run stored again (retried on another worker): one row, the new Trace
    store.keep(_doc("second.py"), "run1")
    assert len(store) == 1 and store.get("run1")["script"]["name"] == "second.py"
    with pytest.raises(RunGone):
        next(pieces)
    new = store.blob("run1")
    stored = b"".join(store.chunks(new, size=100))
    assert json.loads(gzip.decompress(stored))["run"] == {"id": "run1", "link": "/runs/run1"}
    assert first != stored[:1024]
    assert store.head("run1")["name"] == "second.py"


def test_the_signing_key_is_made_once_and_shared(url, store):
    key = store.secret("cookie-signing-key")
    other = PostgresRunStore(url, pool_size=1)  # another web process, or this one restarted
    try:
        assert other.secret("cookie-signing-key") == key and len(key) == 32
        assert other.secret("something-else") != key
    finally:
        other.close()


def test_a_database_that_cannot_be_reached_is_said_without_its_password():
    port = free_port()  # nothing listens there
    store = PostgresRunStore(f"postgresql://someone:hunter2@127.0.0.1:{port}/db")
    with pytest.raises(StoreUnavailable) as caught:
        store.open()
    said = str(caught.value)
    assert "hunter2" not in said and f"port={port}" in said
    assert "AUTOGRAD_LAB_DATABASE_URL" in said
    assert "hunter2" not in repr(store)


def test_names_a_script_chose_are_stored_as_they_are(store):
    name = "x'); DROP TABLE runs; --\x00?.py".replace("\x00", "")
    store.keep(_doc(name, pad="%s %(x)s $1"), "r'1")
    assert store.get("r'1")["script"]["name"] == name
    assert store.get("r'1")["pad"] == "%s %(x)s $1"
    assert store.exists("r'1") and not store.exists("r'2") and len(store) == 1
