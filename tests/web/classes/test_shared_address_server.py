"""A classroom behind one NAT (issue 20), against a real server: every student's browser reaches
the server from one address. Joining a class gives a browser a membership the teacher sees and
may remove; one address has at most `per_address_people` (4) members unless the teacher says the
room shares one network address, and then a class's per-address limits (answers, pages
following, runs sent) and the run queue's count its members. Loopback addresses (127.0.0.x)
stand for the machines, as in test_strangers_server.py."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import httpx
import pytest

from tests.server import browser as new_browser
from tests.server import browsers_of, serve

pytestmark = pytest.mark.slow

ROOM = "127.0.0.21"  # the classroom's router: every student's device, as the server sees it
ELSEWHERE = "127.0.0.22"
QUESTION = {"prompt": "How many uses?", "choices": ["1", "2", "3"], "answer": 2}
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
WAITS = "import time\ntime.sleep(60)\n"  # a run that stays booked until it is stopped


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="shared-address-server", MAX_DRAWINGS="1",
               UPLOAD_WORKERS="1", POOL_SIZE="0", WARM_SCENARIOS="false", SELFTEST="false",
               LOOPBACK_ADDRESSES_APART="true",
               QUEUE_SIZE="64") as url:
        yield url


def _browser(base: str, address: str = ROOM) -> httpx.Client:
    """A new browser behind `address`: its own session cookie, from the first page it opens."""
    return new_browser(base, address, timeout=60)


@pytest.fixture
def browsers():
    """browsers(base, address) -> a new browser, closed after the test."""
    with browsers_of(timeout=60) as make:
        yield lambda base, address=ROOM: make(base, address)


@pytest.fixture
def a_class(base):
    """(teacher, code): a class whose teacher sits in the room (behind the same address)."""
    teacher = _browser(base, ROOM)
    started = teacher.post("/api/classes", json={})
    assert started.status_code == 201, started.text
    code = started.json()["code"]
    yield teacher, code
    teacher.delete(f"/api/classes/{code}")  # its members no longer count for the run queue
    teacher.close()


def _share(teacher: httpx.Client, code: str, on: bool) -> None:
    answer = teacher.patch(f"/api/classes/{code}", json={"shared_address": on})
    assert answer.status_code == 200 and answer.json()["shared_address"] is on, answer.text


def test_the_fifth_browser_from_one_address_is_told_to_ask_for_the_switch(base, a_class,
                                                                         browsers):
    teacher, code = a_class
    # a first page load brings no cookie (it comes with the answer), nor does a program: they
    # read the class without joining, so the address's places are left to browsers
    for page in (f"/c/{code}", f"/api/classes/{code}"):
        with httpx.Client(base_url=base,
                          transport=httpx.HTTPTransport(local_address=ROOM)) as first:
            assert first.get(page).status_code == 200
    assert teacher.get(f"/api/classes/{code}").json()["members"] == 0
    room = [browsers(base) for _ in range(5)]
    codes = [b.get(f"/api/classes/{code}").status_code for b in room]
    assert codes == [200] * 4 + [429], codes
    refused = room[4].get(f"/api/classes/{code}").json()
    assert refused["code"] == "address_full", refused
    assert "This room shares one network address" in refused["detail"]
    page = room[4].get(f"/c/{code}")  # the join page says the same
    assert page.status_code == 429 and "shares one network address" in page.text
    # not a member, so it neither answers, nor follows, nor sends
    qid = teacher.post(f"/api/classes/{code}/question", json=QUESTION).json()["id"]
    assert room[4].post(f"/api/classes/{code}/answer",
                        json={"question": qid, "choice": 0}).status_code == 429
    assert room[4].get(f"/api/classes/{code}/events").status_code == 429
    # someone elsewhere is not affected
    assert browsers(base, ELSEWHERE).get(f"/api/classes/{code}").status_code == 200
    state = teacher.get(f"/api/classes/{code}").json()
    assert state["members"] == 5 and state["turned_away"] == 1 and not state["shared_address"]
    # the teacher switches it on: the fifth joins, and the hint is gone
    _share(teacher, code, True)
    assert room[4].get(f"/api/classes/{code}").status_code == 200
    assert teacher.get(f"/api/classes/{code}").json()["turned_away"] == 0
    # a bad switch is refused with a sentence
    for body in ({"shared_address": "yes"}, {"shared": True}, {}):
        bad = teacher.patch(f"/api/classes/{code}", json=body)
        assert bad.status_code == 422 and bad.json()["detail"], body


def test_a_room_of_thirty_behind_one_address_votes_and_follows(base, a_class, browsers):
    teacher, code = a_class
    _share(teacher, code, True)
    room = [browsers(base) for _ in range(30)]
    assert [b.get(f"/c/{code}").status_code for b in room] == [200] * 30
    qid = teacher.post(f"/api/classes/{code}/question", json=QUESTION).json()["id"]
    votes = [b.post(f"/api/classes/{code}/answer", json={"question": qid, "choice": i % 3})
             for i, b in enumerate(room)]
    assert [v.status_code for v in votes] == [200] * 30, [v.text for v in votes if v.is_error]
    # one who changes their mind is still one vote
    assert room[0].post(f"/api/classes/{code}/answer",
                        json={"question": qid, "choice": 2}).status_code == 200
    tally = teacher.get(f"/api/classes/{code}").json()["question"]["tally"]
    assert sum(tally) == 30, tally
    # a page following the class each: thirty streams from one address
    streams = []
    try:
        for b in room:
            r = b.send(b.build_request("GET", f"/api/classes/{code}/events"), stream=True)
            streams.append(r)
            assert r.status_code == 200
        # still bounded per browser: a student's fifth tab is refused
        for _ in range(3):
            streams.append(room[0].send(room[0].build_request(
                "GET", f"/api/classes/{code}/events"), stream=True))
            assert streams[-1].status_code == 200
        fifth = room[0].get(f"/api/classes/{code}/events")
        assert fifth.status_code == 429 and "close one" in fifth.json()["detail"]
        deadline = time.monotonic() + 10
        while teacher.get(f"/api/classes/{code}").json()["followers"] != 30:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        roster = teacher.get(f"/api/classes/{code}/members")
        assert roster.status_code == 200
        seen = roster.json()
        assert seen["count"] == 30 and seen["shared_address"] is True
        assert seen["addresses"] == [{"name": "address 1", "members": 30, "yours": True,
                                  "shared": True}]
        assert all(m["answered"] is True and m["address"] == "address 1"
                   for m in seen["members"])
        assert sorted(m["streams"] for m in seen["members"]) == [1] * 29 + [4]
        assert len({m["alias"] for m in seen["members"]}) == 30
        assert "127.0.0" not in roster.text  # the page is never shown an address
    finally:
        for r in streams:
            r.close()


def _read_events(response: httpx.Response, out: list) -> None:
    """Every event of a stream until it ends, as (event name, data) into `out`."""
    event = {"event": "message"}
    with contextlib.suppress(httpx.HTTPError):
        for line in response.iter_lines():
            if line.startswith("event:"):
                event["event"] = line[6:].strip()
            elif line.startswith("data:"):
                event["data"] = json.loads(line[5:])
            elif line == "" and "data" in event:
                out.append((event["event"], event["data"]))
                event = {"event": "message"}
    out.append(("closed", None))


def test_the_teacher_removes_a_member(base, a_class, browsers):
    teacher, code = a_class
    leaver, stayer = browsers(base), browsers(base)
    qid = teacher.post(f"/api/classes/{code}/question", json=QUESTION).json()["id"]
    for b, choice in ((leaver, 0), (stayer, 2)):
        assert b.post(f"/api/classes/{code}/answer",
                      json={"question": qid, "choice": choice}).status_code == 200
    ran = leaver.post("/api/runs", json={"source": SMALL})
    assert ran.status_code == 200, ran.text
    run_id = ran.json()["run"]["id"]
    assert leaver.post(f"/api/classes/{code}/runs", json={"run": run_id}).status_code == 200
    stream = leaver.send(leaver.build_request("GET", f"/api/classes/{code}/events"), stream=True)
    assert stream.status_code == 200
    events: list = []
    reader = threading.Thread(target=_read_events, args=(stream, events), daemon=True)
    reader.start()

    # only the teacher lists or removes members, a student nor a stranger
    stranger = browsers(base, ELSEWHERE)
    for who in (stayer, stranger):
        assert who.get(f"/api/classes/{code}/members").status_code == 403
        assert who.delete(f"/api/classes/{code}/members/student-000000").status_code == 403
        assert who.patch(f"/api/classes/{code}",
                         json={"shared_address": True}).status_code == 403
    seen = teacher.get(f"/api/classes/{code}/members").json()
    assert seen["count"] == 2  # the teacher's routes do not make the stranger a member
    alias = next(m["alias"] for m in seen["members"] if m["runs_sent"] == 1)
    assert [m["streams"] for m in seen["members"] if m["alias"] == alias] == [1]
    state = teacher.get(f"/api/classes/{code}").json()
    assert sum(state["question"]["tally"]) == 2 and state["submissions"][0]["by"] == alias

    removed = teacher.delete(f"/api/classes/{code}/members/{alias}")
    assert removed.status_code == 200, removed.text
    # its stream ends at once, saying why
    reader.join(5)
    assert not reader.is_alive(), "the removed member's stream is still open"
    assert ("removed", {"detail": "the teacher removed this browser from the class"}) in events
    assert events[-1] == ("closed", None)
    stream.close()
    # its vote left the tally, its run the list
    state = teacher.get(f"/api/classes/{code}").json()
    assert state["question"]["tally"] == [0, 0, 1] and state["submissions"] == []
    assert state["members"] == 1
    # its cookie cannot come back, by any route
    again = leaver.get(f"/api/classes/{code}")
    assert again.status_code == 403 and again.json()["code"] == "removed_from_class"
    assert "teacher removed this browser" in again.json()["detail"]
    page = leaver.get(f"/c/{code}")
    assert page.status_code == 403 and "Removed from the class" in page.text
    assert leaver.post(f"/api/classes/{code}/answer",
                       json={"question": qid, "choice": 1}).status_code == 403
    assert leaver.get(f"/api/classes/{code}/events").status_code == 403
    assert teacher.delete(f"/api/classes/{code}/members/{alias}").status_code == 404
    # a new browser joins as a new member, whom the teacher sees
    newcomer = browsers(base)
    assert newcomer.get(f"/c/{code}").status_code == 200
    seen = teacher.get(f"/api/classes/{code}/members").json()
    assert seen["count"] == 2 and seen["removed"] == 1
    assert alias not in {m["alias"] for m in seen["members"]}
    # the removed member's place at its address stays taken (issue 38: it was back at once
    # with a fresh cookie): of the 4 an address may stand for, 2 members and 1 removed
    assert browsers(base).get(f"/c/{code}").status_code == 200
    turned = browsers(base).get(f"/api/classes/{code}")
    assert turned.status_code == 429, turned.text
    assert turned.json()["code"] == "address_full"
    assert "(the teacher removed 1)" in turned.json()["detail"]


def _book(browser: httpx.Client, count: int) -> list[httpx.Response]:
    return [browser.post("/api/runs?wait=false", json={"source": WAITS}) for _ in range(count)]


def _stop(booked: list[tuple[httpx.Client, httpx.Response]]) -> None:
    for browser, answer in booked:
        if answer.status_code == 202:
            stopped = browser.delete(f"/api/runs/{answer.json()['id']}")
            assert stopped.status_code in (200, 409), stopped.text


def test_a_room_that_shares_an_address_has_a_share_of_runs_per_member(base, a_class, browsers):
    teacher, code = a_class
    # the switch off: the address stands for 4 people, 3 runs each (1 running, 2 waiting)
    room = [browsers(base) for _ in range(8)]
    booked = [(b, a) for b in room for a in _book(b, 2)]
    try:
        codes = [a.status_code for _, a in booked]
        assert codes.count(202) == 12 and codes.count(429) == 4, codes
        refused = next(a for _, a in booked if a.status_code == 429).json()["detail"]
        assert "This room shares one network address" in refused
    finally:
        _stop(booked)
    # the switch on, and eight members behind the address: 8 people's runs
    _share(teacher, code, True)
    assert [b.get(f"/api/classes/{code}").status_code for b in room] == [200] * 8
    booked = [(b, a) for b in room for a in _book(b, 3)]
    try:
        codes = [a.status_code for _, a in booked]
        assert codes == [202] * 24, [a.text for _, a in booked if a.status_code != 202]
        # and no more: a ninth browser that has not joined finds the address's share taken
        outsider = browsers(base)
        booked += [(outsider, a) for a in _book(outsider, 1)]
        assert booked[-1][1].status_code == 429, booked[-1][1].text
        # another address is not held up
        elsewhere = browsers(base, ELSEWHERE)
        booked += [(elsewhere, a) for a in _book(elsewhere, 1)]
        assert booked[-1][1].status_code == 202, booked[-1][1].text
    finally:
        _stop(booked)
    # the switch off again: the members stay, but the queue counts the setting's 4 people
    _share(teacher, code, False)
    booked = [(b, a) for b in room for a in _book(b, 2)]
    try:
        codes = [a.status_code for _, a in booked]
        assert codes.count(202) == 12 and codes.count(429) == 4, codes
    finally:
        _stop(booked)


def _join(browser: httpx.Client, code: str) -> int:
    return browser.get(f"/api/classes/{code}").status_code


def test_the_switch_opens_the_room_s_address_only(base, a_class, browsers):
    """Found by the attacker's read: with the switch on, a stranger's address joined with 40
    fresh cookies and voted 40 times, and its run share grew with them."""
    teacher, code = a_class
    _share(teacher, code, True)  # the teacher sits in the room: its address is the room's
    assert [_join(browsers(base, ROOM), code) for _ in range(6)] == [200] * 6
    stranger = [_join(browsers(base, "127.0.0.27"), code) for _ in range(6)]
    assert stranger == [200] * 4 + [429] * 2
    roster = teacher.get(f"/api/classes/{code}/members").json()
    shared = [g for g in roster["addresses"] if g["shared"]]
    assert len(shared) == 1 and shared[0]["yours"] and shared[0]["members"] == 6


def test_a_teacher_elsewhere_names_the_room_s_group(base, browsers):
    """A teacher not behind the room's address (a remote teacher) names its group instead."""
    teacher = browsers(base, ELSEWHERE)
    code = teacher.post("/api/classes", json={}).json()["code"]
    try:
        assert [_join(browsers(base, ROOM), code) for _ in range(5)] == [200] * 4 + [429]
        group = next(g["name"] for g in teacher.get(f"/api/classes/{code}/members").json()[
            "addresses"] if not g["yours"])
        answer = teacher.patch(f"/api/classes/{code}", json={"shared_address": group})
        assert answer.status_code == 200 and answer.json()["shared_address"] is True
        assert _join(browsers(base, ROOM), code) == 200
        assert teacher.patch(f"/api/classes/{code}",
                             json={"shared_address": "address 99"}).status_code == 422
    finally:
        teacher.delete(f"/api/classes/{code}")
