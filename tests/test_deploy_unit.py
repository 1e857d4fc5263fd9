"""deploy/autograd-lab.service (issue 19): systemd reads it without a complaint, it delegates
the service's cgroup subtree, and it starts this project's `serve` command."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "autograd-lab.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_the_unit_delegates_the_cgroup_subtree_and_runs_serve():
    service = _unit()["Service"]
    assert service["Delegate"] == "yes"
    assert service["User"] not in ("root", "0")
    command = service["ExecStart"].split()
    assert command[0].endswith("/.venv/bin/autograd-lab")
    args = build_parser().parse_args(command[1:])  # a command this version's CLI has
    assert args.func.__name__ == "cmd_serve"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_reads_the_unit_without_a_complaint(tmp_path):
    # the unit as installed here: this checkout, this interpreter's entry point, this user
    text = UNIT.read_text().replace("/opt/autograd-lab/.venv/bin/autograd-lab",
                                    str(Path(sys.executable).parent / "autograd-lab"))
    text = text.replace("WorkingDirectory=/opt/autograd-lab", f"WorkingDirectory={ROOT}")
    text = text.replace("User=autograd-lab", "User=root")
    unit = tmp_path / "autograd-lab.service"
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    complaints = [line for line in (done.stdout + done.stderr).splitlines()
                  if str(unit) in line]
    assert done.returncode == 0 and not complaints, done.stdout + done.stderr
