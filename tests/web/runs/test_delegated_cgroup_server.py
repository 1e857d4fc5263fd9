"""An ordinary user's server with a cgroup subtree delegated to it (issue 19): every run gets
the whole-run cgroup a root server gives it (memory of all its processes together, a process
count, killed as one), its workers are forked, and where nothing is delegated /healthz names
what is missing and the commands that fix it. The subtree is delegated here as an
administrator would, by root, then the server is started as nobody inside it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.server import serve
from tests.unprivileged import NOBODY, as_unprivileged, can_run_unprivileged, delegated_v1_cgroups
from tests.web.runs.test_hostile_server import EIGHT_CHILDREN, MEMFDS, SMALL

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_run_unprivileged(), reason="needs root to delegate")]


def _settled_sandbox(base: str) -> dict:
    deadline = time.monotonic() + 180
    while (state := httpx.get(base + "/healthz", timeout=10).json()["sandbox"])["state"] \
            == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
    return state


@pytest.fixture(scope="module")
def store():
    folder = Path(tempfile.mkdtemp(prefix="autograd-lab-nobody-"))
    os.chown(folder, NOBODY, NOBODY)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def delegated(store):
    with delegated_v1_cgroups() as folders:
        if folders is None:
            pytest.skip("this machine has no cgroup v1 memory and pids hierarchies to delegate")

        def wrap(cmd: list[str]) -> list[str]:
            return as_unprivileged(cmd, cgroups=folders)

        with serve(store, name="delegated-cgroup-server", wrap=wrap, MAX_DRAWINGS="1",
                   POOL_SIZE="1", UPLOAD_WORKERS="1", RUN_MEMORY_MB="1536",
                   start_timeout=60) as url:
            yield url, folders


def test_the_delegated_cgroup_holds_in_the_self_test(delegated):
    base, folders = delegated
    state = _settled_sandbox(base)
    cgroups = state["layers"]["cgroups"]
    assert cgroups["available"] is True, cgroups["detail"]
    assert str(folders[0]) in cgroups["detail"]
    assert cgroups["holds"] is True, cgroups["checks"]
    assert "cgroups" not in state["missing"]
    assert httpx.get(base + "/healthz", timeout=10).json()["workers"]["forked"] is True


@pytest.mark.parametrize("source", [EIGHT_CHILDREN, MEMFDS], ids=["eight-children", "memfds"])
def test_the_whole_run_memory_limit_holds_without_root(delegated, source):
    base, folders = delegated
    doc = httpx.post(base + "/api/runs", json={"source": source}, timeout=120).json()
    assert doc["error"]["type"] == "MemoryLimit", doc["error"]
    assert "the run as a whole" in doc["error"]["message"].lower()
    assert doc["sandbox"]["forked"] is True
    # runs' cgroups are made in the delegated subtree (the next pooled worker's is there),
    # and this run's is gone again
    made = {p.name for p in folders[0].glob("autograd-lab/*/*-autograd-lab-run-*")}
    assert made and doc["sandbox"]["cgroup"] not in made, (made, doc["sandbox"])
    after = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120).json()
    assert after["error"] is None and after["params"]["w"]["uses"] == {"0": 2}


def test_without_a_delegated_subtree_healthz_names_the_fix(store):
    with serve(store, name="undelegated-server", wrap=as_unprivileged, MAX_DRAWINGS="1",
               POOL_SIZE="1", SELFTEST="true", start_timeout=60) as base:
        cgroups = _settled_sandbox(base)["layers"]["cgroups"]
    assert cgroups["available"] is False
    # what is missing, and the commands that delegate it, with this user's name in them
    assert "memory" in cgroups["detail"] and "pids" in cgroups["detail"]
    assert "chown" in cgroups["detail"] and "nobody" in cgroups["detail"]
    assert "cgroup.procs" in cgroups["detail"]
