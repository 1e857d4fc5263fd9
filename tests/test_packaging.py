"""A non-editable install finds its templates, static files and scenarios, and its runs read
the packages installed beside it (but not the app)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this checkout, installed into a folder of its own named as pip's
    own (site-packages), as in the container image where the app sits beside torch."""
    tmp_path = tmp_path_factory.mktemp("install")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
                    str(ROOT)], check=True, timeout=300, capture_output=True)
    (wheel,) = wheels.glob("autograd_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("app/_data/templates/base.html", "app/_data/static/css/app.css",
                     "app/_data/scenarios/reused_layer.py", "app/format/trace.schema.json",
                     "autograd_lab/__init__.py"):  # %load_ext autograd_lab, from an install
        assert required in names
    target = tmp_path / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=300, capture_output=True)
    return target


@pytest.mark.slow
def test_wheel_carries_data_folders_and_works_installed(installed, tmp_path):
    target = installed
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


CONFINED = """\
import sys, tempfile
from pathlib import Path
import app
from app.runner.protocol import app_root
from app.runner.sandbox.confine import apply_landlock
assert app.__file__.startswith(sys.argv[1]), app.__file__
run_dir = Path(tempfile.mkdtemp())
status = apply_landlock(run_dir, app_root() / "app")
assert status["enforced"], status
import lazy_probe  # installed beside the app, imported only now (as torch imports functorch)
print("lazy", lazy_probe.VALUE)
try:
    open(Path(app.__file__)).read()
    print("app read")
except OSError as e:
    print("app refused", type(e).__name__)
print("said", [p for p in status["read"] if sys.argv[1] in p])
"""


@pytest.mark.slow
def test_the_sandbox_of_an_installed_copy_reads_the_packages_beside_the_app_but_not_the_app(
        installed):
    """Installed, the app is in site-packages with the packages a script imports: the worker's
    Landlock rules let none of them be read after confinement (a package imported late, as
    torch imports functorch, was refused: every run of the container image failed so). All
    but the app now. The worker's own rules, applied in a process that imported the installed
    copy (a run's own root binds site-packages where it is under the interpreter's prefix, as
    in the image; this folder is not, so the rules are tried without one)."""
    from app.runner.sandbox import landlock
    if landlock.abi_version() < 1:
        pytest.skip("no Landlock on this machine: nothing is refused")
    (installed / "lazy_probe").mkdir(exist_ok=True)
    (installed / "lazy_probe" / "__init__.py").write_text("VALUE = 42\n")
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-c", CONFINED, str(installed)], cwd=installed.parent,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["lazy 42", "app refused PermissionError"], lines
    # the sandbox report says the folder in one line, not its hundred entries
    assert lines[2] == f"said [{str(installed.resolve()) + ' (all but app)'!r}]", lines[2]


SYSTEM_INSTALL = """\
import sys, tempfile
from pathlib import Path
import app
from app.runner.protocol import app_root
from app.runner.sandbox.confine import apply_landlock
assert app.__file__.startswith(sys.argv[1]), app.__file__
status = apply_landlock(Path(tempfile.mkdtemp()), app_root() / "app")
assert status["enforced"], status
import lazy_probe  # beside the app: still read after confinement
print("lazy", lazy_probe.VALUE)
for path in (Path(app.__file__), Path(app.__file__).parent / "_data/scenarios/reused_layer.py"):
    try:
        path.read_text()
        print("read", path.name)
    except OSError as e:
        print("refused", path.name, type(e).__name__)
print("said", [p for p in status["read"] if p.startswith(sys.argv[2])])
"""


@pytest.mark.slow
def test_an_installed_copy_in_a_system_folder_does_not_let_a_run_read_the_app(installed):
    """Attack (issue 38): `pip install autograd-lab` without a venv puts the app in
    /usr/local/lib/python3.X/site-packages (Debian's in /usr/lib/python3/dist-packages), and
    the worker's Landlock rules grant /usr/local/lib and /usr/lib whole, for the machine's
    libraries: a run read the app's sources and its scenarios (the lessons' questions and
    answers). A system folder above the app is now split as site-packages is: all but the app.
    The installed copy is bound, in a mount namespace of this test's own, under
    /usr/share/zoneinfo (a system folder the rules grant whole, with nothing Python needs,
    covered there by an empty tmpfs): the machine's own folders are not touched."""
    from app.runner.sandbox import landlock
    if landlock.abi_version() < 1:
        pytest.skip("no Landlock on this machine: nothing is refused")
    if os.geteuid() != 0 or not Path("/usr/share/zoneinfo").is_dir():
        pytest.skip("a mount namespace of the test's own needs root and /usr/share/zoneinfo")
    (installed / "lazy_probe").mkdir(exist_ok=True)
    (installed / "lazy_probe" / "__init__.py").write_text("VALUE = 42\n")
    system = "/usr/share/zoneinfo"
    there = f"{system}/site-packages"
    probe = installed.parent / "system_install_probe.py"
    probe.write_text(SYSTEM_INSTALL)
    script = (f"mount -t tmpfs tmpfs {system} && mkdir {there} && "
              f"mount --bind {installed} {there} && "
              f"exec {sys.executable} {probe} {there} {system}")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          cwd=installed.parent, env={**os.environ, "PYTHONPATH": there},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:3] == ["lazy 42", "refused __init__.py PermissionError",
                         "refused reused_layer.py PermissionError"], lines
    assert lines[3] == f"said [{system + ' (all but site-packages/app)'!r}]", lines[3]


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
