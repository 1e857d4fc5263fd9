"""A real PostgreSQL for tests: Debian's server binaries, a cluster made with initdb in a temp
folder, listening on a free loopback port and a socket folder of its own, stopped when the test
session ends. initdb refuses to run as root, so as root the cluster is made and run as the
`postgres` user (which Debian's package creates); as anyone else, as that user.

    with postgres() as url:   # postgresql://autograd@127.0.0.1:PORT/autograd_lab
        ...

The cluster's folder is made under /tmp (a test's own tmp_path is mode 700 under root's
folder, which the `postgres` user cannot enter) and removed afterwards.

Skips (with the command that installs it) where Debian's PostgreSQL is not installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server import free_port

__all__ = ["Cluster", "cluster", "fresh_database", "postgres", "server_binaries"]

USER = "autograd"
DATABASE = "autograd_lab"


def server_binaries() -> Path | None:
    """Debian's PostgreSQL server folder (initdb, pg_ctl, postgres), the newest installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _as_owner(cmd: list[str], owner: str | None) -> list[str]:
    if owner is None:
        return cmd
    return ["setpriv", f"--reuid={owner}", f"--regid={owner}", "--init-groups", "--", *cmd]


@dataclass
class Cluster:
    """A running cluster of our own: its URL, and stop/start (a database going away)."""

    url: str
    stop: Callable[[], None]
    start: Callable[[], None]


@contextmanager
def postgres() -> Iterator[str]:
    """The URL of a fresh PostgreSQL cluster, with a database and a user of its own (trust on
    loopback only: nothing but this machine can reach the port)."""
    with cluster() as made:
        yield made.url


@contextmanager
def cluster(password_file: Path | None = None) -> Iterator[Cluster]:
    """A fresh PostgreSQL cluster that a test may stop and start again. With `password_file`,
    its user has that file's password and TCP connections must give it (scram-sha-256, as a
    database on another machine asks): libpq finds it in PGPASSFILE, as deploy/compose.yaml
    gives it; without, loopback is trusted."""
    bin_dir = server_binaries()
    if bin_dir is None:
        pytest.skip("Debian's PostgreSQL is not installed (make system-deps-test installs it: "
                    "apt-get install postgresql)")
    owner = None
    if os.geteuid() == 0:
        try:
            owner = str(pwd.getpwnam("postgres").pw_uid)
        except KeyError:
            pytest.skip("running as root, and there is no `postgres` user for initdb")
    top = Path(tempfile.mkdtemp(prefix="autograd-lab-pg-"))
    top.chmod(0o755)
    folder = top / "cluster"
    data, sockets = folder / "data", folder / "sockets"
    for path in (folder, sockets):
        path.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        shutil.chown(folder, int(owner))
        shutil.chown(sockets, int(owner))
    env = {**os.environ, "LC_ALL": "C.UTF-8", "TZ": "UTC"}
    auth = ["--auth=trust"]
    if password_file is not None:  # a copy the cluster's owner may read (initdb reads it)
        readable = folder / "password"
        shutil.copyfile(password_file, readable)
        if owner is not None:
            shutil.chown(readable, int(owner))
        auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={readable}"]
    subprocess.run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, *auth,
                              "--encoding=UTF8", "--no-sync"], owner),
                   check=True, capture_output=True, env=env)
    port = free_port()
    log = folder / "postgres.log"
    # fsync off: a test's cluster need not survive the machine crashing; synchronous_commit
    # stays on, so that a commit survives the server being stopped at once (the tests of a
    # database going away stop it so, and a lost commit would be the test's doing)
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} "
               f"-c unix_socket_directories={sockets} -c fsync=off "
               "-c full_page_writes=off -c max_connections=200")

    def start() -> None:
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log),
                                  "-o", options, "-w", "-t", "60", "start"], owner),
                       check=True, capture_output=True, env=env)

    def stop() -> None:
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m",
                                  "immediate", "-w", "stop"], owner),
                       capture_output=True, env=env)

    start()
    try:
        url = f"postgresql://{USER}@127.0.0.1:{port}"
        _create_database(url)
        yield Cluster(f"{url}/{DATABASE}", stop, start)
    finally:
        stop()
        shutil.rmtree(top, ignore_errors=True)


def _create_database(url: str) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(f"{url}/postgres", autocommit=True, connect_timeout=5) as db:
                db.execute(f"CREATE DATABASE {DATABASE}")
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def fresh_database(url: str) -> str:
    """The URL of a new, empty database on the server of `url`: a test's own tables."""
    import secrets as _secrets

    import psycopg

    base, _ = url.rsplit("/", 1)
    name = f"t_{_secrets.token_hex(6)}"
    with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=10) as db:
        db.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"
