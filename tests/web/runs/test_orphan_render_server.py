"""A server stopped mid-render leaves no graphviz behind (issue 38, point 9): `dot` dies with
the server thread that started it (app/render/draw.py: setpriv's parent-death signal) and has a
CPU-time limit of its own. Against a real server, killed while it draws a forged dense graph
that graphviz takes over a minute to lay out; then a fresh server draws a scenario."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from tests.server import serve
from tests.web.runs.test_forged_reports_server import VALID_FORGERY, WRITE_AND_LEAVE

pytestmark = pytest.mark.slow


def _dense_forgery(nodes: int = 800, edges: int = 3000) -> str:
    """A script writing a report whose graph is 800 ops and 3,000 edges at random: dot lays it
    out in about a minute on this machine (measured), long after the server is gone."""
    return (f"import json, random\nforged = {VALID_FORGERY!r}\nrng = random.Random(0)\n"
            "forged['events'][0]['graph'] = {'roots': ['n0'], 'nodes': [{'id': f'n{i}', "
            f"'name': f'Op{{i}}', 'kind': 'op'}} for i in range({nodes})], 'edges': "
            f"[{{'source': f'n{{rng.randrange(1, {nodes})}}', 'target': "
            f"f'n{{rng.randrange({nodes})}}', 'slot': k}} for k in range({edges})]}}\n"
            "report = json.dumps(forged)" + WRITE_AND_LEAVE)


def _children_named(parent: int, name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == name and int(fields[1]) == parent:  # fields: state, ppid, ...
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_server_killed_mid_render_leaves_no_dot_running(tmp_path):
    info: dict = {}
    with serve(tmp_path / "one", name="orphan-render-server", info=info, POOL_SIZE="0",
               SELFTEST="false", WARM_SCENARIOS="false", UPLOAD_WORKERS="1") as base:
        run = httpx.post(base + "/api/runs", json={"source": _dense_forgery()}, timeout=180)
        assert run.status_code == 200 and run.json()["error"] is None, run.text[:500]
        link = f"{base}/api/runs/{run.json()['run']['id']}/graph.svg?layout=flat"
        threading.Thread(target=lambda: httpx.get(link, timeout=300), daemon=True).start()
        deadline = time.monotonic() + 60
        while not (renders := _children_named(info["pid"], "dot")):
            assert time.monotonic() < deadline, "the server never started graphviz"
            time.sleep(0.2)
        os.kill(info["pid"], signal.SIGKILL)  # the worst stop: nothing of the server runs on
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in renders) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in renders), "dot outlived its server"
    with serve(tmp_path / "two", name="orphan-render-server-after", POOL_SIZE="0",
               SELFTEST="false", WARM_SCENARIOS="false") as base:
        started = time.monotonic()
        drawn = httpx.get(base + "/api/scenarios/reused_layer/graph.svg", timeout=60)
        assert drawn.status_code == 200 and drawn.content.startswith(b"<svg") or \
            b"<svg" in drawn.content[:500]
        assert time.monotonic() - started < 30  # traced and drawn, with nothing left hogging
