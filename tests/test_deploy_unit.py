"""deploy/ (issues 19 and 23): the systemd units of the server and of a course's upload hosts are
read by systemd without a complaint, delegate the service's cgroup subtree and start this
version's `serve` and `upload-host` commands; the compose file of a course names only settings that
exist and commands this CLI has; the Dockerfile copies every package the wheel holds."""

from __future__ import annotations

import configparser
import ipaddress
import shutil
import subprocess
import sys
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
