"""A real server for tests: uvicorn in a subprocess on a free loopback port, started the way
`autograd-lab serve` starts it, with its settings given as AUTOGRAD_LAB_* variables.

    with serve(tmp_path, TOKEN="s3cret", MAX_DRAWINGS="1") as base:
        httpx.get(base + "/healthz")

The run store goes to the given folder (never the user's home); the server's output goes to
test-artifacts/NAME.log, where a failing test's reader finds it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

__all__ = ["ARTIFACTS", "browser", "browsers_of", "free_port", "serve"]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bounded_protocol(tree: Path) -> list[str]:
    """uvicorn's `--http` for the slow-client bounds, wherever the tree keeps them (they moved
    into app/web/http/ in issue 33; bench/classroom.py serves older revisions too)."""
    for where, module in (("app/web/http/slow_clients.py", "app.web.http.slow_clients"),
                          ("app/web/slow_clients.py", "app.web.slow_clients")):
        if (tree / where).exists():
            return ["--http", f"{module}:BoundedH11Protocol"]
    return []


@contextmanager
def serve(store_dir: Path, name: str = "server", start_timeout: float = 30,
          wrap: Callable[[list[str]], list[str]] | None = None, cwd: Path = ROOT,
          info: dict | None = None, **settings: str) -> Iterator[str]:
    """Yield the base URL of a running server; stop it (and its workers) afterwards. `wrap`
    turns the command into another (tests/unprivileged.py: the server as another user); `cwd`
    is the source tree to serve (bench/classroom.py: another revision's); `info` gets the
    server's "pid" (bench/classroom.py reads its memory)."""
    port = free_port()
    log = ARTIFACTS / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AUTOGRAD_LAB_STORE_PATH": str(Path(store_dir) / "runs.sqlite3"),
           **({"PYTHONPATH": str(cwd)} if cwd != ROOT else {}),
           **{f"AUTOGRAD_LAB_{k.upper()}": str(v) for k, v in settings.items()}}
    cmd = [sys.executable, "-m", "uvicorn", "app.web.app:create_app", "--factory",
           "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
           "--no-proxy-headers",
           # the connection bounds `autograd-lab serve` has (a tree from before them has none)
           *_bounded_protocol(Path(cwd))]
    with log.open("wb") as out:
        proc = subprocess.Popen(wrap(cmd) if wrap else cmd, cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    if info is not None:
        info["pid"] = proc.pid
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start; see {log}")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()  # uvicorn's shutdown stops the pool: its idle workers are killed
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def browser(base: str, address: str | None = None, timeout: float = 120) -> httpx.Client:
    """A new browser of `base`: its own session cookie, from the first page it opens; from
    `address` (a loopback source address) where given."""
    transport = httpx.HTTPTransport(local_address=address) if address else None
    client = httpx.Client(base_url=base, timeout=timeout, transport=transport)
    assert client.get("/").status_code == 200 and client.cookies  # its session cookie
    return client


@contextmanager
def browsers_of(base: str | None = None,
                timeout: float = 120) -> Iterator[Callable[..., httpx.Client]]:
    """make(base=..., address=None) -> a new `browser`, all closed when the block ends (the
    base given here is the default of every make)."""
    made: list[httpx.Client] = []

    def make(of: str | None = None, address: str | None = None) -> httpx.Client:
        made.append(browser(of or base, address, timeout))
        return made[-1]

    try:
        yield make
    finally:
        for client in made:
            client.close()


@contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Base URL of a plain HTTP server on loopback giving `folder`'s files as they are (no
    headers of the app's): for loading vendored browser code where no page policy applies."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # the test's output is not a request log
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()
