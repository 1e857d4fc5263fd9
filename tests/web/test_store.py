"""The run store keeps runs across restarts and drops the oldest first."""

from __future__ import annotations

import threading

import pytest

from app.web.gate import Busy, Gate
from app.web.store import RunStore


def doc(name: str, filler: int = 0) -> dict:
    return {"script": {"name": name}, "events": [], "pad": "x" * filler}


def test_runs_survive_a_restart(tmp_path):
    path = tmp_path / "runs.sqlite3"
    run_id = RunStore(path).put(doc("a.py"))
    again = RunStore(path)  # a new process opening the same file
    assert again.get(run_id)["script"]["name"] == "a.py"
    assert again.get("nope") is None


def test_oldest_runs_go_first_by_count(tmp_path):
    store = RunStore(tmp_path / "r.sqlite3", max_runs=3)
    ids = [store.put(doc(f"{i}.py")) for i in range(5)]
    assert len(store) == 3
    assert [store.get(i) is None for i in ids] == [True, True, False, False, False]


def test_oldest_runs_go_first_by_size(tmp_path):
    import os

    store = RunStore(tmp_path / "r.sqlite3", max_bytes=20_000)
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


def test_a_run_larger_than_the_whole_bound_still_answers_its_link(tmp_path):
    import os

    store = RunStore(tmp_path / "r.sqlite3", max_bytes=1000)
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


def test_a_run_over_the_per_run_bound_keeps_its_script_and_pushes_nobody_out(tmp_path):
    import os

    store = RunStore(tmp_path / "r.sqlite3", max_runs=100, max_bytes=4 << 20,
                     max_run_bytes=256 << 10)
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
