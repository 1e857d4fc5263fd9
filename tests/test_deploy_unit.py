"""deploy/ (issues 19 and 23): the systemd units of the server and of a course's upload hosts are
read by systemd without a complaint, delegate the service's cgroup subtree and start this
version's `serve` and `upload-host` commands; the compose file of a course names only settings that
exist and commands this CLI has; the Dockerfile copies every package the wheel holds."""

from __future__ import annotations

import configparser
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
UNITS = {"autograd-lab.service": "cmd_serve", "autograd-lab-upload-host.service": "cmd_upload_host"}


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string((ROOT / "deploy" / name).read_text())
    return parser


@pytest.mark.parametrize("name", UNITS)
def test_the_unit_delegates_the_cgroup_subtree_and_runs_its_command(name):
    service = _unit(name)["Service"]
    assert service["Delegate"] == "yes"
    assert service["User"] not in ("root", "0")
    command = service["ExecStart"].split()
    assert command[0].endswith("/.venv/bin/autograd-lab")
    args = build_parser().parse_args(command[1:])  # a command this version's CLI has
    assert args.func.__name__ == UNITS[name]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize("name", UNITS)
def test_systemd_reads_the_unit_without_a_complaint(tmp_path, name):
    # the unit as installed here: this checkout, this interpreter's entry point, this user
    text = (ROOT / "deploy" / name).read_text().replace("/opt/autograd-lab/.venv/bin/autograd-lab",
                                    str(Path(sys.executable).parent / "autograd-lab"))
    text = text.replace("WorkingDirectory=/opt/autograd-lab", f"WorkingDirectory={ROOT}")
    text = text.replace("User=autograd-lab", "User=root")
    text = text.replace("EnvironmentFile=/etc/", "EnvironmentFile=-/etc/")  # none here
    unit = tmp_path / name
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    complaints = [line for line in (done.stdout + done.stderr).splitlines()
                  if str(unit) in line]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr


# read by `autograd-lab serve` (cli.py), not a Settings field: the token kept out of `ps`
NOT_SETTINGS = {"AUTOGRAD_LAB_TOKEN_FILE"}


def _compose() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())


def test_the_compose_file_names_real_settings_and_commands():
    import tomllib

    from app.web.settings import Settings, env_name

    services = _compose()["services"]
    names = {env_name(f) for f in Settings.__dataclass_fields__} | NOT_SETTINGS
    commands = {}
    for name, service in services.items():
        environment = service.get("environment", {})
        ours = {k: v for k, v in environment.items() if k.startswith("AUTOGRAD_LAB_")}
        assert set(ours) <= names, (name, set(ours) - names)
        if ours:  # the settings as a server would read them: valid, the shared mode on
            settings = Settings.from_env({k: v for k, v in ours.items() if k in names
                                          and k not in NOT_SETTINGS})
            assert settings.database_url.startswith("postgresql://")
            assert ":" not in settings.database_url.split("//")[1].split("@")[0]  # no password
        if "command" in service:
            assert service["command"][0] == "autograd-lab"
            commands[name] = build_parser().parse_args(service["command"][1:]).func.__name__
            assert service["image"] == "autograd-lab:local"
    assert sorted(commands.values()) == ["cmd_serve", "cmd_serve", "cmd_upload_host"]
    assert "upload-host" in services
    # one image, built once: by one service, with the extras the shared mode needs
    (builder,) = [s for s in services.values() if "build" in s]
    assert builder["image"] == "autograd-lab:local"
    assert builder["build"]["args"]["EXTRAS"] == "[shared]"  # psycopg, Procrastinate
    assert "PIP_EXTRA_INDEX_URL" in builder["build"]["args"]  # the CPU torch wheel, if given
    # the image they build holds every package the wheel does
    dockerfile = (ROOT / "Dockerfile").read_text()
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in wheel["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert f"COPY {package} ./{package}" in dockerfile, package
    assert "shared" in wheel["project"]["optional-dependencies"]


def _stages(dockerfile: str) -> dict[str, str]:
    """The Dockerfile's stages by name: each FROM's text up to the next (comments dropped)."""
    lines = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    stages: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("FROM "):
            words = line.split()
            assert words[-2] == "AS", f"every stage is named: {line}"
            current = words[-1]
            stages[current] = []
        elif current is not None:
            stages[current].append(line)
    return {name: "\n".join(body) for name, body in stages.items()}


def test_the_image_is_built_in_a_builder_stage_and_runs_from_a_slim_one():
    """Issue 39: pip, its caches and the build stay in the builder; the runtime holds the
    environment it made, graphviz, and the command a server runs."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = _stages(dockerfile)
    assert list(stages) == ["builder", "runtime"]  # the last stage is what `build` tags
    froms = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    # one base for both: the environment's python links to the base image's interpreter
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in dockerfile.split("FROM ")[0]
    builder, runtime = stages["builder"], stages["runtime"]
    assert "pip install" in builder and "pip install" not in runtime
    assert "python -m venv /opt/venv" in builder
    assert "COPY --from=builder /opt/venv /opt/venv" in runtime
    assert "ENV PATH=/opt/venv/bin:$PATH" in runtime  # the healthchecks' `python` is its
    # the checkout is copied into the builder only (the wheel carries the data folders)
    assert not [line for line in runtime.splitlines()
                if line.startswith("COPY") and "--from=builder" not in line]
    assert "graphviz" in runtime and "graphviz" not in builder
    assert "rm -rf /var/lib/apt/lists/*" in runtime
    # the build arguments the compose file passes reach the builder's install
    for arg in ("PIP_EXTRA_INDEX_URL", "EXTRAS"):
        assert f"ARG {arg}=" in builder
    (cmd,) = [line for line in runtime.splitlines() if line.startswith("CMD ")]
    argv = json.loads(cmd[len("CMD "):])
    assert argv[0] == "autograd-lab"
    assert build_parser().parse_args(argv[1:]).func.__name__ == "cmd_serve"


def test_the_compose_file_publishes_only_the_proxy_on_loopback_and_keeps_secrets_in_files():
    compose = _compose()
    services = compose["services"]
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert list(published) == ["proxy"]
    (port,) = published["proxy"]
    assert port.startswith("${PUBLISH:-127.0.0.1:"), port  # loopback unless the operator says
    # the web processes believe exactly the proxy's fixed address
    proxy_address = services["proxy"]["networks"]["course"]["ipv4_address"]
    subnet = compose["networks"]["course"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(proxy_address) in ipaddress.ip_network(subnet)
    for name in ("web-a", "web-b"):
        assert services[name]["environment"]["AUTOGRAD_LAB_FORWARDED_ALLOW_IPS"] == proxy_address
        assert "healthcheck" in services[name]
    # nginx sends to both web processes' ports, and writes the header they believe as the
    # client's own address, replacing the client's (tests/reverse_proxy.py does the same)
    nginx = (ROOT / "deploy" / "nginx.conf").read_text()
    for name in ("web-a", "web-b"):
        assert f"server {name}:{services[name]['environment']['AUTOGRAD_LAB_PORT']};" in nginx
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in nginx
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in services["proxy"]["volumes"]
    # no secret written in the file: each comes from a file under deploy/secrets/, ignored
    text = (ROOT / "deploy" / "compose.yaml").read_text()
    assert "change-me" not in text and "PASSWORD:" not in text and "AUTOGRAD_LAB_TOKEN:" not in text
    for secret in compose["secrets"].values():
        assert secret["file"].startswith("./secrets/")
    ignored = subprocess.run(["git", "check-ignore", "-q", "deploy/secrets/token"], cwd=ROOT)
    assert ignored.returncode == 0, "deploy/secrets/ must be ignored by git"
    assert services["db"]["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")
    # every service that restarts itself gives up on one that keeps failing at start
    for name in ("web-a", "web-b", "upload-host"):
        assert services[name]["restart"].startswith("on-failure:"), name
        assert "healthcheck" in services[name], name
    for name, service in services.items():
        for condition in (service.get("depends_on") or {}).values():
            assert condition["condition"] in ("service_healthy", "service_started"), name


# ---- the compose services, run on this machine -------------------------------------------------

PROXY_SOURCE = "127.0.0.41"  # the proxy's address as the web processes see it (172.28.0.10 there)
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"


def _here(service: dict, database: str, secrets: Path, **overrides: str) -> dict[str, str]:
    """The service's environment from the compose file, as it would be on this machine: the
    database's host is the test's PostgreSQL, the secrets' files the test's own (made by
    deploy/make-secrets.sh), the proxy's address the test proxy's. What else differs is in
    `overrides`, each said by the caller."""
    from urllib.parse import urlsplit, urlunsplit

    env = {"PATH": "/usr/bin:/bin", "HOME": str(secrets.parent), "PYTHONPATH": str(ROOT),
           "LANG": "C.UTF-8"}
    for key, value in service["environment"].items():
        value = str(value)
        if value.startswith("/run/secrets/"):
            value = str(secrets / value.removeprefix("/run/secrets/"))
        if key == "AUTOGRAD_LAB_DATABASE_URL":
            assert urlsplit(value).hostname == "db"  # the compose service, replaced by ours
            ours = urlsplit(database)
            value = urlunsplit(urlsplit(value)._replace(netloc=ours.netloc, path=ours.path))
        if key == "AUTOGRAD_LAB_FORWARDED_ALLOW_IPS":
            assert value == "172.28.0.10"  # the proxy's fixed address there; ours here
            value = PROXY_SOURCE
        env[key] = value
    env.update(overrides)
    return env


def _command(service: dict) -> list[str]:
    assert service["command"][0] == "autograd-lab"  # this checkout's, with this interpreter
    return [sys.executable, "-m", "app.cli", *service["command"][1:]]


def _health(service: dict, env: dict[str, str]) -> int:
    """The service's health check, run here: its exit status."""
    kind, program, *args = service["healthcheck"]["test"]
    assert (kind, program) == ("CMD", "python")  # the image's python; this venv's here
    return subprocess.run([sys.executable, *args], env=env, capture_output=True,
                          timeout=60).returncode


@pytest.mark.slow
@pytest.mark.postgres
def test_the_compose_services_run_here_behind_a_proxy(tmp_path, monkeypatch):
    """Issue 39's check of the compose file without Docker: web-a, web-b and upload-host run
    with their command and environment from the file, behind a reverse proxy doing what
    deploy/nginx.conf does. Through it: both web processes answer /healthz; a token holder's
    upload runs on the upload host; students behind the proxy are counted by their own
    addresses. Each health check passes on the running service and fails on a stopped one.

    The database asks for the password make-secrets.sh wrote, which the services find only
    through the compose file's PGPASSFILE. What differs from the file, and why: the database's
    address, the secrets' folder and the proxy's address are this machine's (`_here`); the web
    processes bind loopback on free ports instead of 0.0.0.0:8000 in containers of their own;
    loopback addresses count apart (the students here are 127.0.0.x, there they are real
    addresses); the web processes warm no scenarios and pool no workers (two cores shared with
    other tests: who runs uploads does not depend on it).
    """
    from tests.postgres import cluster

    services = _compose()["services"]
    secrets = tmp_path / "secrets"
    subprocess.run(["sh", str(ROOT / "deploy" / "make-secrets.sh"), str(secrets)], check=True,
                   capture_output=True, timeout=60)
    for made in ("token", "db_password", "pgpass"):
        assert (secrets / made).stat().st_mode & 0o077 == 0, made  # libpq ignores a readable one
    token = (secrets / "token").read_text().strip()
    monkeypatch.setenv("PGPASSFILE", str(secrets / "pgpass"))  # this test's own queries
    with cluster(password_file=secrets / "db_password") as made:
        _run_the_services(services, made.url, secrets, token)


def _run_the_services(services: dict, database: str, secrets: Path, token: str) -> None:
    import httpx
    import psycopg

    from tests.reverse_proxy import ReverseProxy
    from tests.server import ARTIFACTS, free_port
    from tests.upload_host_process import alive_hosts

    with pytest.raises(psycopg.OperationalError, match="password"):  # it does ask for one
        psycopg.connect(database, connect_timeout=5, passfile="/nonexistent").close()

    envs, procs = {}, {}
    for name in ("web-a", "web-b"):
        envs[name] = _here(services[name], database, secrets, AUTOGRAD_LAB_HOST="127.0.0.1",
                           AUTOGRAD_LAB_PORT=str(free_port()),
                           AUTOGRAD_LAB_LOOPBACK_ADDRESSES_APART="true",
                           AUTOGRAD_LAB_WARM_SCENARIOS="false", AUTOGRAD_LAB_POOL_SIZE="0")
    envs["upload-host"] = _here(services["upload-host"], database, secrets,
                                AUTOGRAD_LAB_UPLOAD_WORKERS="1")
    ARTIFACTS.mkdir(exist_ok=True)

    def start(name: str) -> None:
        with (ARTIFACTS / f"compose-{name}.log").open("wb") as out:
            procs[name] = subprocess.Popen(_command(services[name]), cwd=ROOT, env=envs[name],
                                           stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)

    def stop(name: str) -> None:
        proc = procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def log(name: str) -> str:
        return (ARTIFACTS / f"compose-{name}.log").read_text()[-3000:]

    def wait_for(name: str, ready, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert procs[name].poll() is None, log(name)
            assert time.monotonic() < deadline, log(name)
            time.sleep(0.5)

    def answers(name: str) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{envs[name]['AUTOGRAD_LAB_PORT']}/healthz",
                             timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        for name in envs:
            start(name)
        for name in ("web-a", "web-b"):
            wait_for(name, lambda name=name: answers(name))
        wait_for("upload-host", lambda: alive_hosts(database))  # its sandbox self-test held
        upstreams = [f"127.0.0.1:{envs[n]['AUTOGRAD_LAB_PORT']}" for n in ("web-a", "web-b")]
        with ReverseProxy(upstreams, source=PROXY_SOURCE) as proxy:
            base = f"http://127.0.0.1:{proxy.port}"

            def browser(address: str, **headers: str) -> httpx.Client:
                return httpx.Client(base_url=base, timeout=180, headers=headers,
                                    transport=httpx.HTTPTransport(local_address=address))

            # /healthz through the proxy, on both web processes: ok (an upload host is live)
            with browser("127.0.0.50") as anyone:
                for _ in range(4):
                    health = anyone.get("/healthz")
                    assert health.status_code == 200 and health.json()["status"] == "ok", \
                        health.text
            assert set(proxy.hits) == set(upstreams)

            # a token holder's upload, from a forwarded address, runs on the upload host
            with browser("127.0.0.51", Authorization=f"Bearer {token}") as teacher:
                ran = teacher.post("/api/runs", json={"source": SMALL})
                assert ran.status_code == 200, ran.text
                doc = ran.json()
                assert doc["error"] is None, doc["error"]
                with psycopg.connect(database) as db:
                    host, address = db.execute("SELECT host, address FROM uploads").fetchone()
                assert host.split(":")[1] == str(procs["upload-host"].pid)  # ran there
                assert address == "127.0.0.51"  # the address the proxy forwarded for
                # what the trace recorded is what PyTorch does with the same script
                import torch
                w = torch.ones(3, requires_grad=True)
                (w * w).sum().backward()
                assert doc["params"]["w"]["grad"]["values"] == w.grad.tolist()

                # students counted by their forwarded address: five browsers from one
                # address meet its limit (per_address_people, 4), one from another does not
                assert teacher.get("/").status_code == 200  # its session cookie
                started = teacher.post("/api/classes", json={})
                assert started.status_code == 201, started.text
                code = started.json()["code"]

            def joins(address: str) -> int:
                with browser(address) as student:
                    assert student.get("/").status_code == 200
                    return student.get(f"/api/classes/{code}").status_code

            assert [joins("127.0.0.52") for _ in range(5)] == [200] * 4 + [429]
            assert joins("127.0.0.53") == 200

        # each health check: passes on the running service, fails on a stopped one
        for name in envs:
            assert _health(services[name], envs[name]) == 0, (name, log(name))
        for name in ("web-b", "upload-host"):
            stop(name)
            assert _health(services[name], envs[name]) != 0, name
    finally:
        for name in procs:
            stop(name)
