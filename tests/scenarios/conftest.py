"""Fixtures for the scenario tests.

`traced(name, *argv)` traces a scenario in-process once per session (several tests read the same
document). `plain(name, *argv)` runs the scenario without the tracer (the way `python
scenarios/NAME.py` would, but in this process) and returns its module globals, so a test can
redo the scenario's computation with plain torch and compare it with what the Trace recorded.
"""

from __future__ import annotations

import pytest

from tests.conftest import SCENARIOS
from tests.scenarios.helpers import run_plainly

_traces: dict[tuple[str, ...], dict] = {}


@pytest.fixture(scope="session")
def traced():
    from app.trace.tracer import trace_script

    def run(name: str, *argv: str) -> dict:
        key = (name, *argv)
        if key not in _traces:
            _traces[key] = trace_script(SCENARIOS / f"{name}.py", argv=list(argv))
        return _traces[key]

    return run


@pytest.fixture(scope="session")
def plain():
    return run_plainly
