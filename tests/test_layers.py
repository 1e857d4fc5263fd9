"""The import rules (.importlinter) hold for the code as it is, and each one fails when the
import it forbids is added: a contract that cannot fail would prove nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copy's `app`, not the installed one
    return subprocess.run([str(LINT_IMPORTS), "--config", str(tree / ".importlinter")], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=120)


def test_every_contract_is_kept():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module, line, contract", [
    ("app/web/runs/trace_service.py", "import torch", "Only the tracer imports torch"),
    ("app/web/routers/api.py", "from app.trace import graph", "Trace documents"),
    ("app/render/dot.py", "from app.trace import summary", "Packages import downwards only"),
    ("app/format/build.py", "from app.runner import protocol", "Packages import downwards only"),
    ("app/trace/graph.py", "import fastapi", "know nothing of the web"),
    ("app/runner/pool.py", "from . import sandboxed_trace", "No import cycles"),
    ("app/runner/child.py", "from app.trace import tracer", "Only the tracer imports torch"),
    ("app/web/routers/runs.py", "from app.runner import Pool", "Routes reach the runner only"),
    ("app/web/store/sqlite.py", "from app.web.runs import gate", "Inside app/web, downwards only"),
    ("app/web/runs/gate.py", "from app.web.http import clients", "Inside app/web, downwards only"),
    ("app/web/classes/classroom.py", "import fastapi", "import no web framework"),
    ("app/web/runs/uploads.py", "from starlette.responses import Response",
     "import no web framework"),
    ("app/web/store/postgres.py", "from fastapi import Request", "import no web framework"),
    ("app/web/routers/runs.py", "from app.web.store import postgres",
     "through their typed dependencies"),
    ("app/web/routers/classes.py", "from app.web.classes import shared",
     "through their typed dependencies"),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, module, line, contract):
    shutil.copytree(ROOT / "app", tmp_path / "app",
                    ignore=shutil.ignore_patterns("__pycache__", "_data"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    target = tmp_path / module
    # at the end of the module, inside a function: import-linter sees imports anywhere
    target.write_text(target.read_text() + f"\n\ndef _forbidden():\n    {line}  # noqa\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, done.stdout[-3000:]


def test_no_router_reaches_into_app_state():
    """Routes name what they need as typed dependencies (app/web/deps.py); `request.app.state`
    is read there and in the factory, never in a router."""
    found = [f"{path.name}:{number}" for path in (ROOT / "app/web/routers").glob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if "app.state" in line]
    assert not found, f"routers reading app.state directly: {found}"
