"""A server that is not root (issue 9, point 6): runs get their namespaces through a user
namespace of their own, a process cap that counts only their processes, and nothing they start
outlives them; the self-test says which layers hold. The server runs as nobody (65534), so a
failure could reach only that user's processes, never the test's."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.runner.conftest import leftovers
from tests.server import serve
from tests.unprivileged import NOBODY, as_unprivileged, can_run_unprivileged

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_run_unprivileged(), reason="needs root to become nobody")]

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"


@pytest.fixture(scope="module")
def base():
    # pytest's own temporary folders are root's alone: nobody's store goes elsewhere
    store = Path(tempfile.mkdtemp(prefix="autograd-lab-nobody-"))
    os.chown(store, NOBODY, NOBODY)
    try:
        with serve(store, name="unprivileged-server", wrap=as_unprivileged, MAX_DRAWINGS="1",
                   POOL_SIZE="1", TRACE_TIMEOUT="10", start_timeout=60) as url:
            yield url
    finally:
        shutil.rmtree(store, ignore_errors=True)


def _processes_of(uid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                found.add(int(entry))
        except FileNotFoundError:
            pass
    return found


def post(base: str, source: str) -> dict:
    response = httpx.post(base + "/api/runs", json={"source": source}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_self_test_says_what_holds_without_root(base):
    deadline = 120
    while (state := httpx.get(base + "/healthz", timeout=10).json()["sandbox"])["state"] \
            == "running" and deadline > 0:
        time.sleep(1)
        deadline -= 1
    layers = state["layers"]
    assert layers["namespaces"]["available"] and layers["namespaces"]["holds"] is True
    assert "user namespace" in layers["namespaces"]["detail"]
    assert layers["landlock"]["holds"] is True and layers["rlimits"]["holds"] is True
    assert "processes" in layers["rlimits"]["checks"]  # the cap is tried, and held
    assert layers["uid"]["available"] is False and "not root" in layers["uid"]["detail"]
    assert "uid" in state["missing"] and state["ok"] is False


CASES = {
    "kill-everyone": ("import os, signal\nos.kill(-1, signal.SIGKILL)\n", "ProcessLookupError",
                      "only its own processes"),
    "fork-bomb": ("import os\nwhile True:\n    os.fork()\n", "BlockingIOError",
                  "at most 32 processes"),
    "setsid-sleeper": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                       "    time.sleep(600)\n" + SMALL, None, ""),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_script_is_contained_without_root(base, name):
    source, kind, words = CASES[name]
    before = _processes_of(NOBODY)
    doc = post(base, source)
    if kind is None:
        assert doc["error"] is None, doc["error"]
    else:
        assert doc["error"]["type"] == kind and words in doc["error"]["message"], doc["error"]
    assert leftovers(doc) == []  # nothing of the run lives on, setsid or not
    # the server (and the worker its pool starts next) is all this user has
    assert httpx.get(base + "/healthz", timeout=10).status_code == 200
    after = post(base, SMALL)
    assert after["error"] is None and after["params"]["w"]["uses"] == {"0": 2}
    assert doc["sandbox"]["namespaces"] == {"net": True, "pid": True, "ipc": True, "mnt": True}
    # forked from the fork server, as root's runs are (issue 19): the next one too
    assert doc["sandbox"]["forked"] is True and after["sandbox"]["forked"] is True
    assert before & _processes_of(NOBODY)  # the server survived the run


def test_runs_are_forked_without_root_and_healthz_says_so(base):
    health = httpx.get(base + "/healthz", timeout=10).json()
    assert health["workers"]["forked"] is True, health["workers"]
    assert "fork server" in health["workers"]["detail"]
    # forked workers cost little to start: three uploads per core, as root's server
    assert health["workers"]["uploads_at_once"] == 3
    doc = post(base, "import os, torch\nw = torch.ones(2, requires_grad=True)\n"
                     "(w * w).sum().backward()\nprint(open('/proc/self/uid_map').read())\n")
    assert doc["sandbox"]["forked"] is True
    # the run's root is the server's user (nobody) and nothing else: a user namespace of its own
    assert doc["stdout"].split() == ["0", str(NOBODY), "1"], doc["stdout"]


# a fault, not a kill(): the worker is PID 1 of its namespace, which a signal from inside with
# no handler does not end
@pytest.mark.parametrize("ending", ["os._exit(137)", "import ctypes\nctypes.string_at(0)"])
def test_a_forked_runs_end_is_told_as_plain_python_ends_it(base, ending, tmp_path):
    """Without root the forked worker is waited for by a parent of its own, which passes its
    end on: a signal as that signal, an exit status as itself. An exit status of 128+9 is the
    script's, not a SIGKILL (a script could otherwise read as killed at a limit)."""
    import signal
    import subprocess
    import sys

    source = f"import os\n{ending}\n"
    (tmp_path / "end.py").write_text(source)
    plain = subprocess.run([sys.executable, str(tmp_path / "end.py")], capture_output=True,
                           timeout=60, check=False)
    error = post(base, source)["error"]
    if plain.returncode < 0:
        name = signal.Signals(-plain.returncode).name
        assert error["type"] == "WorkerCrashed" and f"({name})" in error["message"], error
    else:
        assert error["type"] == "WorkerFailed", error
        assert f"exit status {plain.returncode})" in error["message"], error
    assert post(base, SMALL)["error"] is None  # and the next run works
