"""A non-editable install finds its templates, static files and scenarios."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_carries_data_folders_and_works_installed(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300, capture_output=True)
    (wheel,) = wheels.glob("autograd_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("app/_data/templates/base.html", "app/_data/static/css/app.css",
                     "app/_data/scenarios/reused_layer.py", "app/format/trace.schema.json",
                     "autograd_lab/__init__.py"):  # %load_ext autograd_lab, from an install
        assert required in names

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=300, capture_output=True)
    # Run from an empty folder with the installed copy first on the path: the source tree's
    # folders must not be what it finds.
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = (
        "import app, app.resources as r\n"
        "from fastapi.testclient import TestClient\n"
        "from app.web.app import create_app\n"
        "print(app.__file__)\n"
        "print(r.resource_dir('templates'))\n"
        "c = TestClient(create_app(), base_url='http://127.0.0.1')\n"
        "print(c.get('/').status_code, c.get('/static/css/app.css').status_code)\n"
        "print([s['name'] for s in c.get('/api/scenarios').json()])\n"
        "from app.format import new_document, validate\n"
        "validate(new_document('x.py', '', 'cpu', None))\n"  # the schema travels in the wheel
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    app_file, templates, statuses, scenarios = done.stdout.strip().splitlines()
    assert app_file.startswith(str(target))
    assert templates.startswith(str(target))
    assert statuses == "200 200"
    assert "reused_layer" in scenarios


def _requirement_names(requirements: list[str]) -> set[str]:
    import re
    return {re.split(r"[\[<>=;! ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_shared_extra_is_pinned_to_what_is_installed():
    """Every package of the shared mode's extra has one version in constraints.txt (issue 39:
    only torch was pinned), and that version is the one installed here, which the shared mode's
    tests ran against. Procrastinate matters most: its tables are made from its schema, never
    migrated by us."""
    import tomllib
    from importlib.metadata import version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    shared = _requirement_names(project["optional-dependencies"]["shared"])
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, pinned = line.split("==")
            pins[name.strip().lower()] = pinned.strip()
    # psycopg[binary,pool] brings two distributions of its own
    needed = shared | {"psycopg-binary", "psycopg-pool"}
    assert needed <= pins.keys(), f"not pinned in constraints.txt: {sorted(needed - pins.keys())}"
    for name in sorted(needed):
        assert version(name) == pins[name], (name, version(name), pins[name])
