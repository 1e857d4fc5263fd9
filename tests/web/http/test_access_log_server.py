"""A stranger cannot fill the disk through the access log (what issue 38's audit bound left):
uvicorn wrote a line for every request. Against a real server logging as `autograd-lab serve`
does (level info, uvicorn's access log on): one address's burst keeps PER_ADDRESS lines and
one line counting the rest; another address keeps all of its own; a normal run right after
works and is answered as plain Python answers it. A request line of 10 KB writes a line of a
few hundred characters."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from app.web.http.access_log import PATH_CHARS, PER_ADDRESS
from tests.server import ARTIFACTS, serve

pytestmark = pytest.mark.slow

BURST = PER_ADDRESS + 150
NORMAL = ("import torch\nw = torch.tensor([3.0, -1.0], requires_grad=True)\n"
          "(w * w).sum().backward()\nprint(w.grad.tolist())\n")


def _as_serve_logs(cmd: list[str]) -> list[str]:
    """The test server's command, logging at `autograd-lab serve`'s level (info)."""
    at = cmd.index("--log-level")
    return [*cmd[:at + 1], "info", *cmd[at + 2:]]


def _from(base: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=60,
                        transport=httpx.HTTPTransport(local_address=address))


def test_a_burst_of_requests_writes_a_bounded_number_of_access_lines(tmp_path):
    name = "access-log-server"
    # 127.0.0.2 and .3 stand for two machines (else all of loopback is one place, one window)
    with serve(tmp_path, name=name, wrap=_as_serve_logs, POOL_SIZE="0",
               WARM_SCENARIOS="false", SELFTEST="false", UPLOAD_WORKERS="1",
               LOOPBACK_ADDRESSES_APART="true") as base:
        with _from(base, "127.0.0.2") as stranger:
            for _ in range(BURST):
                assert stranger.get("/healthz").status_code == 200
        with _from(base, "127.0.0.3") as other:
            for _ in range(20):
                assert other.get("/healthz").status_code == 200
            ran = other.post("/api/runs", json={"source": NORMAL, "name": "normal.py"},
                             timeout=180)
        with _from(base, "127.0.0.2") as stranger:  # past its share, still answered
            assert stranger.get("/api/scenarios").status_code == 200
    text = (ARTIFACTS / f"{name}.log").read_text()
    lines = {a: re.findall(rf"^.*{re.escape(a)}:\d+ - \"[A-Z]+ [^\n]*$", text, re.M)
             for a in ("127.0.0.2", "127.0.0.3")}
    assert len(lines["127.0.0.2"]) == PER_ADDRESS, len(lines["127.0.0.2"])
    # the other address's own requests are all there, its run too
    assert len(lines["127.0.0.3"]) >= 21, lines["127.0.0.3"][-3:]
    assert any('"POST /api/runs' in line for line in lines["127.0.0.3"])
    (held,) = re.findall(r"access_lines_held_back address=127\.0\.0\.2 count=(\d+)", text)
    assert int(held) == BURST + 1 - PER_ADDRESS  # the burst's rest and the late request
    assert ran.status_code == 200, ran.text
    plain = subprocess.run([sys.executable, "-c", NORMAL], capture_output=True, text=True,
                           timeout=120, check=True)
    assert ran.json()["error"] is None and ran.json()["stdout"].strip() == plain.stdout.strip()


def test_a_long_request_line_writes_a_short_access_line(tmp_path):
    name = "access-log-long-path"
    path = "/" + "p" * 6000 + "?q=" + "x" * 4000  # a 10 KB path and query
    with serve(tmp_path, name=name, wrap=_as_serve_logs, POOL_SIZE="0",
               WARM_SCENARIOS="false", SELFTEST="false", UPLOAD_WORKERS="1") as base:
        with httpx.Client(base_url=base, timeout=60) as client:
            assert client.get(path).status_code == 404
            assert client.get("/healthz?after=long").status_code == 200
    text = (ARTIFACTS / f"{name}.log").read_text()
    (line,) = [line for line in text.splitlines() if '"GET /ppp' in line]
    assert line.count("p") >= PATH_CHARS - 10  # the line is there, its path's start kept
    assert len(line) < PATH_CHARS + 200, len(line)
    assert ' HTTP/1.1" 404' in line, line[-80:]
    assert any('"GET /healthz?after=long HTTP/1.1" 200' in line for line in text.splitlines())
