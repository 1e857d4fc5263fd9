"""deploy/ (issues 19 and 23): the systemd units of the server and of a course's upload hosts are
read by systemd without a complaint, delegate the service's cgroup subtree and start this
version's `serve` and `upload-host` commands; the compose file of a course names only settings that
exist and commands this CLI has; the Dockerfile copies every package the wheel holds."""

from __future__ import annotations

import configparser
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


def test_the_compose_file_names_real_settings_and_commands():
    import tomllib

    yaml = pytest.importorskip("yaml")
    from app.web.settings import Settings, env_name

    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    names = {env_name(f) for f in Settings.__dataclass_fields__}
    commands = {}
    for name, service in services.items():
        environment = service.get("environment", {})
        ours = {k: v for k, v in environment.items() if k.startswith("AUTOGRAD_LAB_")}
        assert set(ours) <= names, (name, set(ours) - names)
        if ours:  # the settings as a server would read them: valid, the shared mode on
            settings = Settings.from_env(ours)
            assert settings.database_url.startswith("postgresql://")
        if "command" in service:
            assert service["command"][0] == "autograd-lab"
            commands[name] = build_parser().parse_args(service["command"][1:]).func.__name__
            assert service["build"]["args"]["EXTRAS"] == "[shared]"  # psycopg, Procrastinate
    assert sorted(commands.values()) == ["cmd_serve", "cmd_serve", "cmd_upload_host"]
    assert "upload-host" in services
    # the image they build holds every package the wheel does
    dockerfile = (ROOT / "Dockerfile").read_text()
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in wheel["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert f"COPY {package} ./{package}" in dockerfile, package
    assert "shared" in wheel["project"]["optional-dependencies"]
