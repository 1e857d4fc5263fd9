"""Hostile scripts sent to a real server: each gets its own clear error, and right after each
the server still answers /healthz and still runs a normal script (issue 5).

The sandbox's own tests (tests/runner/test_hostile.py) go through every case at the runner;
these send the worst of them the way a stranger would, through POST /api/runs.
"""

from __future__ import annotations

import httpx
import pytest

from tests.server import serve

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"

EIGHT_CHILDREN = """
import os
touched_r, touched_w = os.pipe()
release_r, release_w = os.pipe()
pids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        os.close(touched_r)
        os.close(release_w)
        block = bytearray(1 << 30)
        for i in range(0, len(block), 4096):
            block[i] = 1
        os.write(touched_w, b"t")
        os.close(touched_w)
        os.read(release_r, 1)  # keeps its GiB until all eight have touched theirs (or died)
        os._exit(0)
    pids.append(pid)
os.close(touched_w)
os.close(release_r)
heard = 0
while heard < 8 and os.read(touched_r, 1):
    heard += 1
os.close(release_w)
for pid in pids:
    os.waitpid(pid, 0)
"""
MEMFDS = """
import os
chunk = b"x" * (1 << 20)
fds = []
for _ in range(32):  # 2 GiB in memfds of 64 MiB: memory no process maps, each under FSIZE
    fd = os.memfd_create("hoard")
    for _ in range(64):
        os.write(fd, chunk)
    fds.append(fd)
"""

CASES = {
    "endless_loop": ("import torch\nwhile True:\n    pass\n", "Timeout", "limit"),
    # every process alone is under its rlimits; the run together is not (its cgroup)
    "eight_children_of_1gib": (EIGHT_CHILDREN, "MemoryLimit", "the run as a whole"),
    "memfd_of_2gib": (MEMFDS, "MemoryLimit", "the run as a whole"),
    # in the run's PID namespace, -1 means the run's own processes only: here, none
    "kill_everyone": ("import os, signal\nos.kill(-1, signal.SIGKILL)\n", "ProcessLookupError",
                      "only its own processes"),
    "fork_bomb": ("import os\nwhile True:\n    os.fork()\n", None, "processes"),
    "memory_bomb": ("import torch\nx = torch.empty(10**12)\n", None, "memory"),
    # not even there: the run's own root holds a few files of /etc, none of them the machine's
    # accounts (its passwd names only the run's own)
    "read_shadow": ("print(open('/etc/shadow').read())\n", "FileNotFoundError",
                    "nothing else of this machine is there"),
    "detached_sleeper": ("import subprocess, sys\n"
                         "subprocess.Popen([sys.executable, '-c', 'import time; "
                         "time.sleep(600)'], start_new_session=True)\n" + SMALL, None, ""),
}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="hostile-server",
               MAX_DRAWINGS="1", UPLOAD_WORKERS="1",
               QUEUE_SIZE="4", POOL_SIZE="1", TRACE_TIMEOUT="10", SELFTEST="false",
               RUN_MEMORY_MB="1536") as url:
        yield url


def post(base: str, source: str) -> httpx.Response:
    return httpx.post(base + "/api/runs", json={"source": source}, timeout=120)


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_script_then_the_server_still_serves(base, name):
    source, kind, words = CASES[name]
    response = post(base, source)
    assert response.status_code == 200, response.text
    error = response.json()["error"]
    if name == "detached_sleeper":
        # the child cannot even start (no exec in the sandbox): the error names the refusal
        assert error is not None and "sandbox" in error["message"].lower()
    elif kind is None and not words:
        assert error is None, error  # it ran; what it tried reached only its own processes
    else:
        assert error is not None, f"{name} was not stopped"
        if kind:
            assert error["type"] == kind, error
        assert words in error["message"].lower(), error
    assert httpx.get(base + "/healthz", timeout=5).status_code == 200
    after = post(base, SMALL)
    assert after.status_code == 200 and after.json()["error"] is None
    assert after.json()["params"]["w"]["uses"] == {"0": 2}
