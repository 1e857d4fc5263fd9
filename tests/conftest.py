"""Shared fixtures. Traces are made in-process (`trace_script`) where a test checks what the
tracer records, and through the runner (a child process) where it checks the runner."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


@pytest.fixture
def trace_source(tmp_path):
    """trace_source(code, argv=None, name="script.py") -> Trace document, traced in-process."""
    from app.trace.tracer import trace_script

    def run(code: str, argv: list[str] | None = None, name: str = "script.py", **kwargs) -> dict:
        path = tmp_path / name
        path.write_text(textwrap.dedent(code), encoding="utf-8")
        return trace_script(path, argv=argv, **kwargs)

    return run


@pytest.fixture
def trace_scenario():
    """trace_scenario(name, *argv) -> Trace document of scenarios/NAME.py, traced in-process."""
    from app.trace.tracer import trace_script

    def run(name: str, *argv: str) -> dict:
        return trace_script(SCENARIOS / f"{name}.py", argv=list(argv))

    return run


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL on loopback for the whole session (tests/postgres.py); each test that
    needs a clean one drops what it made."""
    from tests.postgres import postgres

    with postgres() as url:
        yield url
