"""The admin page in the shared mode (issue 39): one real PostgreSQL, two web processes A and
B. A class started on A is on B's admin page with its members; its followers are counted over
both processes (one student follows on A, another on B: B's page says 2); B ends it from its
admin page, and a member's own request on A finds the class ended."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.postgres import fresh_database
from tests.server import serve

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOKEN = "admin-shared-s3cret"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _web(tmp_path_factory, name: str, database: str):
    return serve(tmp_path_factory.mktemp(name), name=f"shared/admin-{name}",
                 DATABASE_URL=database, TOKEN=TOKEN, WARM_SCENARIOS="false", POOL_SIZE="0",
                 SELFTEST="false", WAIT_FOR_UPLOAD_HOSTS="true")


def _follow(client: httpx.Client, url: str, opened: threading.Event,
            done: threading.Event) -> threading.Thread:
    def read() -> None:
        with client.stream("GET", url, timeout=60) as events:
            for line in events.iter_lines():
                if line.startswith("data:"):
                    opened.set()
                    done.wait(60)
                    return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _listed(base: str, code: str) -> dict | None:
    answer = httpx.get(base + "/api/admin", headers=BEARER, timeout=30)
    assert answer.status_code == 200, answer.text
    return next((c for c in answer.json()["classes"] if c["code"] == code), None)


def test_classes_and_their_followers_over_two_web_processes(tmp_path_factory, postgres_url):
    database = fresh_database(postgres_url)
    with _web(tmp_path_factory, "a", database) as a, _web(tmp_path_factory, "b", database) as b, \
            httpx.Client(base_url=a, timeout=60) as teacher, \
            httpx.Client(base_url=a, timeout=60) as ana, \
            httpx.Client(base_url=b, timeout=60) as ben:
        for who in (teacher, ana, ben):
            assert who.get("/").status_code == 200
        code = teacher.post("/api/classes", json={}, headers=BEARER).json()["code"]
        assert ana.get(f"/c/{code}").status_code == 200  # joins on A
        assert ben.get(f"/c/{code}").status_code == 200  # joins on B
        assert ana.put(f"/api/classes/{code}/name", json={"name": "Ana"}).status_code == 200

        done = threading.Event()
        opened = [threading.Event(), threading.Event()]
        readers = [_follow(ana, f"{a}/api/classes/{code}/events", opened[0], done),
                   _follow(ben, f"{b}/api/classes/{code}/events", opened[1], done)]
        try:
            assert all(o.wait(30) for o in opened)
            # each process reports its own followers every few seconds: both are counted
            deadline = time.monotonic() + 30
            while (listed := _listed(b, code))["followers"] != 2:
                assert time.monotonic() < deadline, f"followers never 2 on B: {listed}"
                time.sleep(0.5)
            assert listed["members_count"] == 2 and listed["teacher"] == "the server's token"
            assert "Ana" in [m["name"] for m in listed["members"]]
            # A counts B's as well, once B reported them (every FOLLOWERS_EVERY_S): B seeing 2
            # says A reported, not that B did
            while (on_a := _listed(a, code))["followers"] != 2:
                assert time.monotonic() < deadline, f"followers never 2 on A: {on_a}"
                time.sleep(0.5)
            page = httpx.get(b + "/admin", headers=BEARER, timeout=30)
            assert page.status_code == 200 and f"Class {code}" in page.text
        finally:
            done.set()
            for reader in readers:
                reader.join(60)

        ended = httpx.post(f"{b}/api/admin/classes/{code}/end", json={}, headers=BEARER,
                           timeout=30)
        assert ended.status_code == 200, ended.text
        # on A, Ana's own requests: her right to run code is gone at once (asked of the
        # table), and the class is over once A has heard B's change (LISTEN/NOTIFY, within
        # moments: classes/shared.py)
        assert ana.get("/api/uploads").json()["class_member"] is None
        deadline = time.monotonic() + 10
        while (seen := ana.get(f"/api/classes/{code}")).status_code == 200 and \
                not seen.json()["ended"]:
            assert time.monotonic() < deadline, f"A never heard that the class ended: {seen.text}"
            time.sleep(0.1)
        assert _listed(a, code) is None and _listed(b, code) is None
