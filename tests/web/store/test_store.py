"""The run store keeps runs across restarts and drops the oldest first: the SQLite file of one
machine and PostgreSQL (AUTOGRAD_LAB_DATABASE_URL, every web process's), the same tests."""

from __future__ import annotations

import threading

import pytest

from app.web.runs.gate import Busy, Gate
from app.web.store.sqlite import RunStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def make_store(request, tmp_path):
    """make_store(**bounds) -> a store; called again, the same store as a new process opens
    it (the same file, the same database)."""
    if request.param == "sqlite":
        return lambda **bounds: RunStore(tmp_path / "r.sqlite3", **bounds)
    from app.web.store.postgres import PostgresRunStore
    from tests.postgres import fresh_database

    url = fresh_database(request.getfixturevalue("postgres_url"))
    opened: list[PostgresRunStore] = []
    request.addfinalizer(lambda: [s.close() for s in opened])

    def make(**bounds):
        opened.append(PostgresRunStore(url, pool_size=2, **bounds))
        return opened[-1]

    return make


def doc(name: str, filler: int = 0) -> dict:
    return {"script": {"name": name}, "events": [], "pad": "x" * filler}


def test_runs_survive_a_restart(make_store):
    run_id = make_store().put(doc("a.py"))
    again = make_store()  # a new process opening the same file (the same database)
    assert again.get(run_id)["script"]["name"] == "a.py"
    assert again.get("nope") is None


def test_oldest_runs_go_first_by_count(make_store):
    store = make_store(max_runs=3)
    ids = [store.put(doc(f"{i}.py")) for i in range(5)]
    assert len(store) == 3
    assert [store.get(i) is None for i in ids] == [True, True, False, False, False]


def test_oldest_runs_go_first_by_size(make_store):
    import os

    store = make_store(max_bytes=20_000)
    # random hex compresses only to about half: each run takes about 8.5 kB on disk
    ids = [store.put({**doc(f"{i}.py"), "pad": os.urandom(8000).hex()}) for i in range(4)]
    kept = [store.get(i) is not None for i in ids]
    assert kept[-1] and not kept[0]
    assert sum(kept) == 2


def test_gate_turns_away_past_workers_plus_queue():
    gate = Gate(workers=1, queue=1)
    inside, release = threading.Event(), threading.Event()

    def hold():
        with gate.enter():
            inside.set()
            release.wait(5)

    running = threading.Thread(target=hold)
    running.start()
    inside.wait(5)
    waiting = threading.Thread(target=lambda: gate.enter().__enter__())  # takes the queue place
    waiting.start()
    for _ in range(100):  # until the waiter is counted
        if sum(gate.load()) == 2:
            break
        threading.Event().wait(0.01)
    with pytest.raises(Busy):
        with gate.enter():
            pass
    release.set()
    running.join(5)
    waiting.join(5)


def test_a_run_larger_than_the_whole_bound_still_answers_its_link(make_store):
    import os

    store = make_store(max_bytes=1000)
    old = store.put(doc("old.py"))
    big = store.put({**doc("big.py"), "pad": os.urandom(4000).hex()})
    assert store.get(big)["script"]["name"] == "big.py"
    assert store.get(old) is None


def test_making_a_store_writes_nothing_until_it_is_used(tmp_path):
    path = tmp_path / "deep" / "runs.sqlite3"
    store = RunStore(path)
    assert not path.parent.exists()  # an app object alone leaves no file behind
    store.put(doc("a.py"))
    assert path.exists()


def test_a_run_over_the_per_run_bound_keeps_its_script_and_pushes_nobody_out(make_store):
    import os

    store = make_store(max_runs=100, max_bytes=4 << 20, max_run_bytes=256 << 10)
    others = [store.put(doc(f"{i}.py", filler=10_000)) for i in range(5)]
    # a report a script filled with what gzip cannot shrink: bigger than the per-run bound
    big = {"script": {"name": "big.py", "source": "print(1)\n", "args": []}, "torch": "2",
           "device": "cpu", "events": [], "pad": os.urandom(1 << 20).hex()}
    big_id = store.put(big)
    # keep() says so: the queue hands out its parsed Trace for drawings only when kept whole
    assert store.keep(big, "big-again") is False and store.keep(doc("c.py"), "c") is True
    kept = store.get(big_id)
    assert kept["script"]["source"] == "print(1)\n" and "pad" not in kept
    assert kept["error"]["type"] == "TraceTooLarge" and "KiB" in kept["error"]["message"]
    assert all(store.get(i) is not None for i in others)  # nobody else was dropped


def test_the_sqlite_store_is_the_servers_alone(tmp_path):
    """Every run's script is in it: other local users read none of it (issue 38, point 10)."""
    import os
    import stat

    store = RunStore(tmp_path / "new" / "runs.sqlite3").open()
    store.keep(doc("a.py"), "r1")
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
    made = sorted(p for p in (tmp_path / "new").iterdir())  # the file and any journal beside
    assert made and all(stat.S_IMODE(os.stat(p).st_mode) & 0o077 == 0 for p in made), \
        [(p.name, oct(os.stat(p).st_mode)) for p in made]
    # a store an older release made readable by all is made private when opened
    old = tmp_path / "old.sqlite3"
    old.touch()
    os.chmod(old, 0o644)
    RunStore(old).open()
    assert stat.S_IMODE(os.stat(old).st_mode) == 0o600


def test_one_persons_many_big_runs_push_out_their_own_not_others(make_store):
    """Issue 38: 18 runs of 15 MB from one member pushed every other run out, the run a
    student had sent to the teacher included. The biggest holder's runs go first."""
    import os

    def big(name: str) -> dict:  # random hex: about 8.5 kB stored
        return {**doc(name), "pad": os.urandom(8000).hex()}

    store = make_store(max_bytes=40_000)
    ann = store.put(doc("ann.py"))                 # one small run
    sent = "sent-to-teacher"
    store.keep(big("bob-sent.py"), sent, owner="cookie:bob")
    store.pin(sent)                                # as a class's send does
    store.keep(doc("ann2.py"), "ann-2", owner="cookie:ann")
    flood = [f"eve-{i}" for i in range(8)]
    for run_id in flood:
        store.keep(big(f"{run_id}.py"), run_id, owner="cookie:eve")
    assert store.get("ann-2") is not None and store.get(sent) is not None
    assert store.get(ann) is not None              # the unknown owner held little too
    kept = [store.get(r) is not None for r in flood]
    assert kept[-1] and not kept[0]                # eve's oldest went, her newest answers


def test_the_fair_share_picks_the_biggest_holder_then_the_oldest():
    from app.web.store.fair_share import victims

    rows = [("a1", 10, "a", 0.0), ("b1", 30, "b", 0.0), ("b2", 10, "b", 100.0),
            ("a2", 10, "a", 0.0), ("c1", 25, "c", 0.0)]  # b2 pinned until t=100
    # bytes over by 45: b holds most (40): b1 goes, then a (20) vs b (10): a1; then a and b
    # hold 10 each, but b2 is pinned (10 bytes: within a quarter of the store): a2
    assert victims(rows, keep="c1", now=50.0, max_runs=10, max_bytes=40) == ["b1", "a1", "a2"]
    # the pin has ended: b2 is b's, and of equals the older first run goes
    assert victims(rows, keep="c1", now=200.0, max_runs=10, max_bytes=40) == ["b1", "a1", "b2"]
    # the count bound: runs held, not bytes; a tie (a and b hold 2) goes to the older first run
    assert victims(rows, keep="c1", now=200.0, max_runs=4, max_bytes=10**9) == ["a1"]
    # nothing may go (pinned, or the run just kept): the bound stays past, nothing is lost
    assert victims([("x", 99, "x", 10.0)], keep="y", now=0.0, max_runs=0, max_bytes=400) == []


def test_pins_are_kept_within_a_share_of_their_own():
    """Issue 38: four browsers on one address pinned 20 runs (sent to the teacher) and then
    every other run was dropped. A person's pins keep at most PINNED_PER_PERSON runs, an
    address's that times its people, all pins a quarter of the store; the rest are ordinary
    runs of their owner's share."""
    from app.web.store.fair_share import PINNED_PER_PERSON, victims

    flood = [(f"m{m}-{k}", 1, f"m{m}", 1e9, "10.0.0.66") for m in range(4) for k in range(5)]
    honest = [("h1", 1, "h", 0.0, "10.0.0.77"), ("h2", 1, "h", 0.0, "10.0.0.77")]
    teacher = [("t1", 1, "t", 0.0, "10.0.0.1")]
    rows = honest + flood + teacher
    gone = victims(rows, keep="t1", now=0.0, max_runs=12, max_bytes=10**9, people_per_address=4)
    assert len(rows) - len(gone) == 12
    assert not {"h1", "h2", "t1"} & set(gone)  # the honest student's and the teacher's stay
    kept_flood = [r[0] for r in flood if r[0] not in gone]
    # what stays of the flood: pinned runs kept by their pins (3 = 12 // 4 in all) and the
    # address's share of the rest
    assert len(kept_flood) == 12 - 3
    per_person = {m: sum(r.startswith(f"m{m}-") for r in kept_flood) for m in range(4)}
    assert max(per_person.values()) - min(per_person.values()) <= 1, per_person
    # one person's many pins: no more than PINNED_PER_PERSON are kept by them
    mine = [(f"p{k}", 1, "p", 1e9, "10.0.0.5") for k in range(10)]
    gone = victims(mine + [("x", 1, "x", 0.0, "10.0.0.6")], keep="", now=0.0, max_runs=8,
                   max_bytes=10**9)
    assert "x" not in gone and len(gone) == 3  # p's own unprotected pins went, oldest first
    assert gone == ["p0", "p1", "p2"] and PINNED_PER_PERSON <= 8 // 4 + 1


def test_a_stranger_with_a_cookie_per_run_holds_what_their_address_holds():
    """Issue 38: a stranger with a fresh cookie per run pushed out an honest student's runs
    (each cookie held one run, the student two). An address's runs count too, shared by the
    people it may stand for."""
    from app.web.store.fair_share import victims

    honest = [("h1", 1, "h", 0.0, "10.0.0.77"), ("h2", 1, "h", 0.0, "10.0.0.77")]
    stranger = [(f"s{i}", 1, f"cookie{i}", 0.0, "10.0.0.66") for i in range(12)]
    gone = victims(honest + stranger, keep="s11", now=0.0, max_runs=10, max_bytes=10**9,
                   people_per_address=4)
    assert gone == ["s0", "s1", "s2", "s3"]  # the stranger's oldest, not h1, h2: 8 left are 2 each
    # one address with a cookie each is no worse off than people apart, up to its people
    apart = [(f"p{i}", 1, f"person{i}", 0.0, f"10.0.1.{i}") for i in range(4)]
    gone = victims(honest + apart, keep="", now=0.0, max_runs=5, max_bytes=10**9)
    assert gone == ["h1"]  # h holds the most


def test_both_stores_count_an_address_and_bound_pins(make_store):
    """The same rules in SQLite and PostgreSQL: cookies from one address share its share, and
    pins past a person's bound keep nothing."""
    store = make_store(max_runs=10)
    store.keep(doc("h1.py"), "h1", owner="honest", address="10.0.0.77")
    store.keep(doc("h2.py"), "h2", owner="honest", address="10.0.0.77")
    for i in range(12):
        store.keep(doc(f"s{i}.py"), f"s{i}", owner=f"cookie{i}", address="10.0.0.66")
    assert store.get("h1") is not None and store.get("h2") is not None
    assert [store.get(f"s{i}") is None for i in range(12)] == [True] * 4 + [False] * 8


def test_both_stores_keep_pins_only_within_their_bounds(make_store):
    """One person pinning six runs (sent to the teacher): three are kept by their pins (and
    3 = a quarter of 12 in all), the rest are that person's ordinary runs and go first."""
    store = make_store(max_runs=12)
    for i in range(6):
        store.keep(doc(f"p{i}.py"), f"p{i}", owner="pinner", address="10.0.0.5")
        store.pin(f"p{i}")
    for i in range(8):
        store.keep(doc(f"o{i}.py"), f"o{i}", owner=f"other{i}", address=f"10.0.1.{i}")
    assert all(store.get(f"o{i}") is not None for i in range(8))
    assert [store.get(f"p{i}") is None for i in range(6)] == [True, True] + [False] * 4


def test_an_older_sqlite_store_gets_the_address_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE run_owners (id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
                   "pinned_until REAL NOT NULL DEFAULT 0)")
        db.execute("INSERT INTO run_owners (id, owner) VALUES ('r0', 'someone')")
    store = RunStore(path).open()
    store.keep(doc("a.py"), "r1", owner="me", address="10.0.0.1")
    assert store.get("r1") is not None


def test_an_open_class_teachers_runs_are_kept_within_the_pins_quarter():
    """Issue 38: "a run sent to the teacher, and the teacher's own, kept while the class is
    open". The teacher holds the most here, yet their runs stay, up to a quarter of the store
    (4 of 16); past it their oldest go like anyone's."""
    from app.web.store.fair_share import victims

    teacher = [(f"t{i}", 1, "teacher", 0.0, "10.0.0.1") for i in range(6)]
    others = [(f"o{i}", 1, f"o{i}", 0.0, f"10.0.1.{i}") for i in range(12)]
    rows = teacher + others
    assert victims(rows, keep="", now=0.0, max_runs=16, max_bytes=10**9) == ["t0", "t1"]
    kept_as_teacher = victims(rows, keep="", now=0.0, max_runs=16, max_bytes=10**9,
                              teachers=["teacher"])
    assert kept_as_teacher == ["t0", "t1"]  # 6 > 4: the newest 4 are kept
    rows = teacher[:4] + others + [(f"o{i}", 1, f"o{i}", 0.0, f"10.0.1.{i}") for i in (12, 13)]
    assert victims(rows, keep="", now=0.0, max_runs=16, max_bytes=10**9) == ["t0", "t1"]
    assert victims(rows, keep="", now=0.0, max_runs=16, max_bytes=10**9,
                   teachers=["teacher"]) == ["o0", "o1"]


def test_the_sqlite_store_keeps_the_runs_of_the_teachers_it_is_told_of(tmp_path):
    store = RunStore(tmp_path / "r.sqlite3", max_runs=8).open()
    store.teachers = lambda: ["teacher"]
    for i in range(2):
        store.keep(doc(f"t{i}.py"), f"t{i}", owner="teacher", address="10.0.0.1")
    for i in range(7):
        store.keep(doc(f"o{i}.py"), f"o{i}", owner=f"o{i}", address=f"10.0.1.{i}")
    assert store.get("t0") is not None and store.get("t1") is not None
    assert store.get("o0") is None  # of equals (one run each), the oldest went
