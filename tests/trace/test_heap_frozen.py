"""The collector's pause during a traced run (heap_frozen.py) changes nothing the code can see:
a cycle made before the run and dropped is freed by the code's own gc.collect() as plain
Python frees it, and afterwards the process's collector is as it was."""

from __future__ import annotations

import gc
import weakref

from app.trace.in_namespace import trace_source

CELL = "import gc\nfound = gc.collect()\nalive = ref() is not None\n"


class _Cycle:
    pass


def _dropped_cycle() -> weakref.ref:
    a = _Cycle()
    a.me = a
    return weakref.ref(a)


def test_the_codes_own_collect_frees_a_cycle_made_before_the_run_as_plain_python_does():
    plain = {"ref": _dropped_cycle()}
    exec(CELL, plain)  # noqa: S102 - the same cell, without autograd-lab
    assert plain["alive"] is False and plain["found"] >= 1
    traced = {"ref": _dropped_cycle()}
    doc = trace_source(CELL, traced, name="collect")
    assert doc["error"] is None
    assert traced["alive"] is plain["alive"]
    assert traced["found"] >= 1


def test_the_collector_is_left_as_it_was():
    collect, enabled = gc.collect, gc.isenabled()
    trace_source("x = [1]\n", {}, name="after")
    assert gc.get_freeze_count() == 0
    assert gc.collect is collect and gc.isenabled() is enabled
    ref = _dropped_cycle()
    gc.collect()
    assert ref() is None  # what the run left to the collector is collected again


def test_a_freeze_of_the_processs_own_is_kept():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        trace_source("import gc\ngc.collect()\n", {}, name="kept")
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
