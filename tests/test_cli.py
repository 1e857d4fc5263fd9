"""The command line, run as a user runs it: a real child process, the real worker."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from app.format import load_schema


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_trace_writes_a_valid_document(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text("import torch\nw = torch.ones(2, requires_grad=True)\n"
                      "(w * 3).sum().backward()\nprint(w.grad.tolist())\n")
    out = tmp_path / "trace.json"
    done = cli("trace", str(script), "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["stdout"] == "[3.0, 3.0]\n"
    assert doc["script"]["name"] == "tiny.py"


def test_render_svg_png_dot_of_a_scenario_with_arguments(tmp_path):
    for suffix in ("svg", "png", "dot"):
        out = tmp_path / f"graph.{suffix}"
        done = cli("render", "reused_layer", "-o", str(out), "--", "--k", "2")
        assert done.returncode == 0, done.stderr
        assert out.stat().st_size > 100
    ET.parse(tmp_path / "graph.svg")  # well-formed XML
    assert (tmp_path / "graph.png").read_bytes()[:4] == b"\x89PNG"
    # k=2: the middle weight feeds two TBackward0 nodes
    dot = (tmp_path / "graph.dot").read_text()
    assert dot.count("middle_linear.weight") == 1


def test_cuda_on_a_machine_without_it(tmp_path):
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has CUDA")
    script = tmp_path / "s.py"
    script.write_text("import torch\n(torch.ones(1, requires_grad=True) * 2).sum().backward()\n")
    done = cli("trace", str(script), "--device", "cuda", "-o", str(tmp_path / "t.json"))
    assert done.returncode != 0
    assert "device 'cuda' is not available" in done.stderr
    assert "Traceback" not in done.stderr
    done = cli("trace", str(script), "--device", "cuda:1", "-o", str(tmp_path / "t.json"))
    assert done.returncode != 0 and "'cuda:1'" in done.stderr


def test_unknown_device_spelling_is_refused_before_running(tmp_path):
    done = cli("trace", "reused_layer", "--device", "gpu")
    assert done.returncode == 2
    assert "unknown device 'gpu': use cpu, cuda or cuda:N" in done.stderr


def test_script_past_its_time_limit_is_stopped_at_its_line(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text("import torch\nx = 0\nwhile True:\n    x += 1\n")
    done = cli("trace", str(script), "--timeout", "4", "-o", str(tmp_path / "t.json"))
    assert done.returncode == 1
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["error"]["type"] == "Timeout"
    assert doc["error"]["line"] in (3, 4)
    assert "4 s limit" in doc["error"]["message"]
    assert "Timeout (line" in done.stderr


def test_a_stopped_script_says_how_to_give_it_longer_and_keeps_what_it_recorded(tmp_path):
    """Issue 36: a long script stopped at the CLI's limit is told the option that raises it,
    and the backward passes it made before the stop are in the Trace: .grad as PyTorch left
    it after them (the same lines run plainly)."""
    head = ("import torch\nw = torch.tensor([1.0, -2.0], requires_grad=True)\n"
            "for k in range(3):\n    (w * w * (k + 1)).sum().backward()\n")
    script = tmp_path / "long.py"
    script.write_text(head + "while True:\n    pass\n")
    done = cli("trace", str(script), "--timeout", "4", "-o", str(tmp_path / "t.json"))
    assert done.returncode == 1
    assert "--timeout 60" in done.stderr and "3 backward pass(es)" in done.stderr, done.stderr
    assert str(tmp_path / "t.json") in done.stderr
    doc = json.loads((tmp_path / "t.json").read_text())
    passes = [e for e in doc["events"] if e["kind"] == "backward"]
    plain: dict = {}
    exec(head, plain)
    assert len(passes) == 3
    assert passes[-1]["grads"]["w"]["after"]["norm"] == pytest.approx(
        plain["w"].grad.norm().item(), rel=1e-6)



def test_a_stopped_script_s_drawing_says_which_pass_it_shows_once_drawn(tmp_path):
    """`render` of a script stopped at --timeout: the drawing holds one backward pass, so
    that is what is said, after it is written; where nothing could be drawn, no drawing is
    claimed. The drawn pass is the first one: its backward functions, as PyTorch names them,
    are in the drawing and the next passes' are not."""
    import torch

    from tests.trace_facts import grad_fns

    passes = ["(w * w).sum()", "w.exp().sum()", "w.tanh().sum()"]
    head = "import torch\nw = torch.tensor([1.0, -2.0], requires_grad=True)\n" + "".join(
        f"{p}.backward()\n" for p in passes)
    script = tmp_path / "long.py"
    script.write_text(head + "while True:\n    pass\n")
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    names = [{type(fn).__name__ for fn in grad_fns(eval(p, {"w": w}).grad_fn)} - {
        "AccumulateGrad"} for p in passes]
    out = tmp_path / "g.dot"
    done = cli("render", str(script), "--timeout", "4", "-o", str(out))
    assert done.returncode == 1 and out.exists(), done.stderr
    assert "--timeout 60" in done.stderr
    assert f"The drawing ({out}) shows backward pass 1 of the 3 recorded" in done.stderr, \
        done.stderr
    assert "is kept in the drawing" not in done.stderr
    drawing = out.read_text()
    assert all(name in drawing for name in names[0]), names[0]
    later = (names[1] | names[2]) - names[0]  # ExpBackward0, TanhBackward0
    assert later and not any(name in drawing for name in later), later

    none = tmp_path / "none.dot"
    done = cli("render", str(script), "--timeout", "4", "--event", "999", "-o", str(none))
    assert done.returncode == 1 and not none.exists()
    assert "cannot draw" in done.stderr and "--timeout 60" in done.stderr, done.stderr
    assert "Nothing was drawn" in done.stderr and "The drawing (" not in done.stderr


def test_errors_name_the_script_line_not_a_traceback(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import torch\n\nraise KeyError('no such layer')\n")
    done = cli("trace", str(script), "-o", str(tmp_path / "t.json"))
    assert done.returncode == 1
    assert "KeyError (line 3 of bad.py)" in done.stderr
    assert "Traceback" not in done.stderr


def test_scenarios_lists_the_scenarios():
    done = cli("scenarios")
    assert done.returncode == 0
    assert "reused_layer" in done.stdout


def test_missing_script_is_a_clear_error():
    done = cli("trace", "no_such_file.py")
    assert done.returncode != 0
    assert "no such script 'no_such_file.py'" in done.stderr


def test_render_draws_a_big_model_by_module_unless_asked_for_every_node(tmp_path):
    script = tmp_path / "deep.py"
    script.write_text("import torch\nfrom torch import nn\n"
                      "net = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh())"
                      " for _ in range(60)])\n"
                      "net(torch.randn(2, 4)).sum().backward()\n")
    out = tmp_path / "g.dot"
    done = cli("render", str(script), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "drawn by module from" in done.stdout and "--flat" in done.stdout
    grouped = out.read_text()
    assert "× 60" in grouped or "× 59" in grouped  # the 60 blocks, folded
    done = cli("render", str(script), "-o", str(out), "--flat")
    assert done.returncode == 0, done.stderr and "by module" not in done.stdout
    flat = out.read_text()
    assert flat.count("AddmmBackward0 —") == 60 and "×" not in flat  # its tooltips


def test_the_upload_host_keeps_its_former_name_and_says_so(tmp_path):
    # `autograd-lab worker` was its name: a unit file or compose file written for it still
    # starts it, told the new name; without the shared line both refuse, naming the setting
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith("AUTOGRAD_LAB_")}
    env["AUTOGRAD_LAB_STORE_PATH"] = str(tmp_path / "runs.sqlite3")
    for command in ("upload-host", "worker"):
        done = subprocess.run([sys.executable, "-m", "app.cli", command], capture_output=True,
                              text=True, timeout=120, env=env)
        assert done.returncode == 2, done.stderr
        assert "AUTOGRAD_LAB_DATABASE_URL" in done.stderr, done.stderr
        assert ("now called autograd-lab upload-host" in done.stderr) == (command == "worker")


def _notebook(cells: list[tuple[str, str]]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": kind, "metadata": {}, "source": text,
         **({"outputs": [], "execution_count": None} if kind == "code" else {})}
        for kind, text in cells]})


def test_a_notebook_is_traced_as_the_server_runs_an_upload(tmp_path):
    """Issue 37: `autograd-lab trace x.ipynb` runs the code cells (an IPython-only line skipped
    and said) and says a failure's line as the notebook's cell and line."""
    cells = [("markdown", "# a leaf changed in place"),
             ("code", "%matplotlib inline\nimport torch\nw = torch.ones(3, requires_grad=True)"),
             ("code", "loss = (w * 2).sum()\nw.add_(1)\nloss.backward()")]
    path = tmp_path / "course.ipynb"
    path.write_text(_notebook(cells), encoding="utf-8")
    # plain Python, the cells' code as they run there (the magic is IPython's)
    code = "import torch\nw = torch.ones(3, requires_grad=True)\nloss = (w * 2).sum()\nw.add_(1)\n"
    try:
        exec(compile(code, "<plain>", "exec"), {})  # noqa: S102 - the test's own code
    except RuntimeError as exc:
        plain = str(exc)
    out = tmp_path / "t.json"
    done = cli("trace", str(path), "-o", str(out))
    assert done.returncode == 1, done.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["error"]["message"] == plain
    assert doc["script"]["notebook"]["name"] == "course.ipynb"
    assert "(cell 3, line 2 of course.ipynb)" in done.stderr, done.stderr
    assert "Where: cell 3, line 2" in done.stderr
    assert any(d["code"] == "notebook_skipped" or "%matplotlib" in d["message"]
               for d in doc["diagnostics"])


def test_a_file_that_is_not_a_notebook_says_what_to_do(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text('{"cells": [', encoding="utf-8")
    done = cli("trace", str(path))
    assert done.returncode != 0 and "not valid JSON" in done.stderr and "Save" in done.stderr


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc: no psutil here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_sigterm_stops_the_worker_and_removes_its_folder(tmp_path):
    """A service manager's or a shell's SIGTERM ends the CLI the way Ctrl-C does: the sandboxed
    worker is stopped with it and its run folder removed, and the CLI says so (the default
    action killed the CLI alone and left the folder behind)."""
    script = tmp_path / "sleepy.py"
    script.write_text("import time, torch\nx = torch.ones(2, requires_grad=True)\n"
                      "(x * 2).sum().backward()\ntime.sleep(60)\n")
    cli_process = subprocess.Popen([sys.executable, "-m", "app.cli", "trace", str(script),
                                    "--timeout", "90"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        launched: list[int] = []
        while not launched and time.monotonic() < deadline and cli_process.poll() is None:
            launched = _children(cli_process.pid)
            time.sleep(0.2)
        assert launched, "the CLI started no worker"
        folders = set()
        workers = set(launched)
        for pid in launched:
            workers.update(_children(pid))
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            folders.update(re.findall(r"/tmp/autograd-lab-run-[A-Za-z0-9_]+", cmdline))
        time.sleep(1.0)  # past the launch: the script is running
        cli_process.send_signal(signal.SIGTERM)
        out, err = cli_process.communicate(timeout=60)
    finally:
        if cli_process.poll() is None:
            cli_process.kill()
    assert cli_process.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in err and "worker was stopped" in err
    assert out == ""  # nothing traced, and no Trace pretending otherwise
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in workers if _alive(pid)]
    assert folders and not [f for f in folders if Path(f).exists()]
