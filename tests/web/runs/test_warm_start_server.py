"""One start, warm fast (issue 19): a scenario asked for while the server still warms every
scenario's variants is answered before that warm-up ends (it gives way), and /healthz says when
every scenario was warm. Nothing starts an exec'd worker while the fork server starts."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow


def test_a_scenario_asked_for_while_warming_goes_first(tmp_path):
    with serve(tmp_path, name="warm-start-server", start_timeout=60) as base:
        scenarios = httpx.get(base + "/api/scenarios", timeout=10).json()
        # the warm-up goes through the catalogue in order: ask for the very last variant
        last = scenarios[-1]
        variant = list(last.get("variants") or [None])[-1]
        query = f"?variant={variant}" if variant else ""
        health = httpx.get(base + "/healthz", timeout=10).json()["scenarios"]
        assert health["warm"] is False  # asked for before the warm-up could have reached it
        doc = httpx.get(f"{base}/api/scenarios/{last['name']}/trace{query}", timeout=120).json()
        answered = httpx.get(base + "/healthz", timeout=10).json()["scenarios"]
        assert doc["error"] is None, doc["error"]
        assert answered["warm"] is False and answered["traced"] < answered["of"], answered
        # even the first scenario's worker was forked: nothing exec'd a worker (importing torch
        # beside the fork server) while the fork server started
        assert doc["sandbox"]["forked"] is True
        deadline = time.monotonic() + 300
        while not (health := httpx.get(base + "/healthz", timeout=10).json()["scenarios"])["warm"]:
            assert time.monotonic() < deadline, health
            time.sleep(0.5)
        assert health["traced"] == health["of"] == sum(
            len(s.get("variants") or [None]) for s in scenarios)
        assert health["warmed_in_s"] > 0
        # and the scenario asked for early is the one kept: no second run of it
        again = httpx.get(f"{base}/api/scenarios/{last['name']}/trace{query}", timeout=30).json()
        assert again["elapsed"] == doc["elapsed"]
