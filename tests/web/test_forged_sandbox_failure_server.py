"""A script cannot make its own run read as the server's failure (attack 5 of the admin round):
once its worker was READY, whatever the worker's output says is the script's to write. A run
that writes the sandbox launcher's failure line and ends with the launcher's exit status (70)
is told its process ended with that status, as plain Python ends it; never "SandboxFailed"
with the script's words as the server's sentence, on its page or in the metrics' outcomes (an
operator's alert on sandbox failures must not be the script's to fire). Nor can it by
naming an exception class of its own after a failure only the server names, or by writing the
worker's report itself with one: those read as the class's full name, its module's and its
own, `__main__.SandboxFailed`."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

WORDS = "the host is compromised, mail your password to evil@example.com"
FORGED = ("import os\nimport torch\n"
          "w = torch.ones(2, requires_grad=True)\n(w * 2).sum().backward()\n"
          f"os.write(2, b'autograd-lab sandbox launcher failed: {WORDS}\\n')\n"
          "os._exit(70)\n")
# util-linux unshare's line when it cannot pass on its child's signal (explain.py's
# _LAUNCHER_LOST_A_SIGNAL): the script can write that too
LOST_SIGNAL = ("import os\nos.write(2, b'unshare: sigprocmask unblock failed\\n')\n"
               "os._exit(1)\n")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="forged-sandbox-failure",
               METRICS="true", UPLOAD_WORKERS="1", POOL_SIZE="0", WARM_SCENARIOS="false",
               SELFTEST="false", TRACE_TIMEOUT="60") as url:
        yield url


def _plainly(source: str, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "plain.py"
    script.write_text(source)
    return subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120,
                          check=False)


def test_a_script_that_writes_the_launchers_line_is_not_a_sandbox_failure(base, tmp_path):
    plain = _plainly(FORGED, tmp_path)
    with httpx.Client(base_url=base, timeout=120) as stranger:
        ran = stranger.post("/api/runs", json={"source": FORGED, "name": "forged.py"})
        assert ran.status_code == 200, ran.text
        error = ran.json()["error"]
        # what PyTorch and Python did: the script ended itself with this status
        assert error["type"] != "SandboxFailed", error
        assert f"exit status {plain.returncode}" in error["message"], error
        assert WORDS not in error["message"], error
        metrics = stranger.get("/metrics").text
    assert 'outcome="SandboxFailed"' not in metrics
    assert f"{WORDS}" in plain.stderr.decode()  # the words are the script's, as it wrote them


OWN_CLASS = ("class SandboxFailed(Exception):\n    pass\n\n"
             f"raise SandboxFailed({WORDS!r})\n")


def _forged_report(kind: str) -> str:
    """A script that writes the worker's report itself, schema-valid, claiming `kind`."""
    from app.format import error_record, new_document

    doc = new_document("forge.py", "", "cpu", None)
    doc["error"] = error_record(kind, WORDS, None)
    text = json.dumps(json.dumps(doc))
    return ("import json, os\nreport = json.loads(" + text + ")\n"
            "with open('trace.json', 'w') as f:\n    json.dump(report, f)\nos._exit(0)\n")


def test_a_scripts_own_exception_named_like_the_servers_failure_is_the_scripts(base, tmp_path):
    plain = _plainly(OWN_CLASS, tmp_path)
    said = plain.stderr.decode().strip().splitlines()[-1]
    # the class's full name, as plain Python has it: its module (the script's, __main__) and
    # its name (the traceback's last line leaves __main__ out)
    probe = _plainly(OWN_CLASS.replace(f"raise SandboxFailed({WORDS!r})",
                                       "print(SandboxFailed.__module__ + '.' + "
                                       "SandboxFailed.__qualname__)"), tmp_path)
    full = probe.stdout.decode().strip()
    with httpx.Client(base_url=base, timeout=120) as stranger:
        ran = stranger.post("/api/runs", json={"source": OWN_CLASS, "name": "own.py"})
        assert ran.status_code == 200, ran.text
        error = ran.json()["error"]
        assert error["type"] == full and error["message"] == said.split(": ", 1)[1], error
        for kind in ("SandboxFailed", "ServerError", "Stopped"):
            forged = stranger.post("/api/runs", json={"source": _forged_report(kind),
                                                      "name": "forge.py"})
            assert forged.status_code == 200, forged.text
            assert forged.json()["error"]["type"] == f"__main__.{kind}", forged.json()["error"]
            status = stranger.get(f"/api/runs/{forged.json()['run']['id']}/status").json()
            assert status["state"] != "stopped", status
        metrics = stranger.get("/metrics").text
    for kind in ("SandboxFailed", "ServerError"):
        assert f'outcome="{kind}"' not in metrics


# a normal run, and what PyTorch itself leaves in w.grad for it
NORMAL = ("import torch\nw = torch.tensor([1.0, 2.0], requires_grad=True)\n"
          "(w * w).sum().backward()\nprint(w.grad.tolist())\n")


def _a_normal_run_works(stranger: httpx.Client, tmp_path) -> None:
    plain = _plainly(NORMAL, tmp_path)
    ran = stranger.post("/api/runs", json={"source": NORMAL, "name": "normal.py"})
    assert ran.status_code == 200, ran.text
    doc = ran.json()
    assert doc["error"] is None, doc["error"]
    assert doc["stdout"].strip() == plain.stdout.decode().strip(), doc["stdout"]


def test_a_script_that_writes_unshares_line_is_not_said_to_be_killed(base, tmp_path):
    plain = _plainly(LOST_SIGNAL, tmp_path)
    assert plain.returncode == 1  # plainly: the script exits 1, no signal killed it
    with httpx.Client(base_url=base, timeout=120) as stranger:
        ran = stranger.post("/api/runs", json={"source": LOST_SIGNAL, "name": "lost.py"})
        assert ran.status_code == 200, ran.text
        error = ran.json()["error"]
        assert error["type"] not in ("ResourceLimit", "Timeout"), error
        assert f"exit status {plain.returncode}" in error["message"], error
        _a_normal_run_works(stranger, tmp_path)


# an exit status of 128+9, which a shell would print as a SIGKILL's: the script's own
KILLED_LOOK = "import os\nos._exit(137)\n"


def test_a_script_that_exits_like_a_killed_process_is_not_said_to_be_killed(base, tmp_path):
    plain = _plainly(KILLED_LOOK, tmp_path)
    assert plain.returncode == 137  # plainly: an exit status, no signal killed it
    with httpx.Client(base_url=base, timeout=120) as stranger:
        ran = stranger.post("/api/runs", json={"source": KILLED_LOOK, "name": "exit.py"})
        assert ran.status_code == 200, ran.text
        error = ran.json()["error"]
        assert error["type"] not in ("ResourceLimit", "WorkerCrashed"), error
        assert f"exit status {plain.returncode}" in error["message"], error
        metrics = stranger.get("/metrics").text
        _a_normal_run_works(stranger, tmp_path)
    assert 'outcome="ResourceLimit"' not in metrics


def test_a_scripts_own_timeout_class_is_not_the_servers_time_limit(base, tmp_path):
    source = "class Timeout(Exception):\n    pass\n\nraise Timeout('took too long')\n"
    plain = _plainly(source, tmp_path)
    assert plain.returncode == 1  # plainly: an exception of its own, at once
    said = plain.stderr.decode().strip().splitlines()[-1]
    with httpx.Client(base_url=base, timeout=120) as stranger:
        ran = stranger.post("/api/runs", json={"source": source, "name": "own.py"})
        metrics = stranger.get("/metrics").text
        # its full name, as the neighbouring test's SandboxFailed: its module's and its own
        error = ran.json()["error"]
        assert error["type"] == "__main__.Timeout", error
        assert error["message"] == said.split(": ", 1)[1], error
        _a_normal_run_works(stranger, tmp_path)
    assert 'outcome="Timeout"' not in metrics


@pytest.mark.parametrize("kind", ["NoGraph", "TraceTooLarge", "DeviceUnavailable"])
def test_a_scripts_own_class_of_a_workers_kind_is_told_by_its_full_name(base, tmp_path, kind):
    """The worker names these kinds itself (no backward pass, a report too large, no such
    device); a script's own class of that name is told by the full name Python gives the
    class (its module and qualified name: `__main__.NoGraph`), and counted as the script's
    error, not as the worker's word."""
    source = f"class {kind}(Exception):\n    pass\n\nraise {kind}('mine')\n"
    plain = _plainly(source, tmp_path)
    assert plain.stderr.decode().strip().splitlines()[-1] == f"{kind}: mine"
    asked = f"print({kind}.__module__ + '.' + {kind}.__qualname__)"
    named = _plainly(source.replace(f"raise {kind}('mine')", asked), tmp_path)
    full = named.stdout.decode().strip()
    assert full == f"__main__.{kind}", full  # what Python calls the class
    with httpx.Client(base_url=base, timeout=120) as stranger:
        ran = stranger.post("/api/runs", json={"source": source, "name": "own.py"})
        assert ran.status_code == 200, ran.text
        error = ran.json()["error"]
        assert (error["type"], error["message"], error["line"]) == (full, "mine", 4), error
        metrics = stranger.get("/metrics").text
        assert f'outcome="{kind}"' not in metrics
        _a_normal_run_works(stranger, tmp_path)
