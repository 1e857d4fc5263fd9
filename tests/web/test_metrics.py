"""GET /metrics in process (issue 39): 404 while the setting is off, whatever the caller sends;
on, the token's holder only (401 without it or with a wrong one); two apps in one process keep
counts of their own; a 503 the app answers is counted by its reason; and in the shared mode the
database pool is shown, its connections lent out counted while a transaction holds one.

The runs, the 429, the drawings and the followers are counted against a real server:
test_metrics_server.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.web.app import create_app
from app.web.metrics import outcome_of
from tests.metrics_scrape import scrape, value
from tests.web.conftest import LOCAL

TOKEN = "metrics-s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_metrics_are_404_while_the_setting_is_off(client):
    for headers in ({}, AUTH):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "no_metrics"  # said as JSON, as to a program


def test_metrics_need_the_token_when_one_is_set(settings, tiny_dir):
    app = create_app(settings(metrics=True, token=TOKEN), scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as c:
        assert c.get("/metrics").status_code == 401
        wrong = c.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        response = c.get("/metrics", headers=AUTH)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        samples = scrape(response.text)
        # unlabelled gauges are there from the start, at zero
        assert value(samples, "autograd_lab_class_followers") == 0
        assert value(samples, "autograd_lab_class_event_streams") == 0


def test_without_a_token_the_metrics_are_open_as_healthz_is(settings, tiny_dir):
    app = create_app(settings(metrics=True), scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as c:
        assert c.get("/metrics").status_code == 200


def test_a_503_is_counted_by_its_reason_in_its_own_apps_registry(settings, tiny_dir):
    """The scenario lane's gate held full: the next trace is refused 503 `busy`, counted once,
    and only in this app's registry (a second app in the process counts nothing)."""
    first = create_app(settings(metrics=True, queue_size=0), scenarios_dir=tiny_dir)
    second = create_app(settings(metrics=True), scenarios_dir=tiny_dir)
    with TestClient(first, client=LOCAL) as a, TestClient(second, client=LOCAL) as b:
        before = scrape(a.get("/metrics").text)
        with first.state.traces.scenarios.gate.enter():  # the one scenario worker taken
            refused = a.get("/api/scenarios/tiny/trace")
        assert refused.status_code == 503 and refused.json()["code"] == "busy"
        after = scrape(a.get("/metrics").text)
        assert value(after, "autograd_lab_refusals_total", status="503", reason="busy") == \
            value(before, "autograd_lab_refusals_total", status="503", reason="busy") + 1
        # a refusal is no run
        assert value(after, "autograd_lab_runs_total", lane="scenario", outcome="done") == 0
        other = scrape(b.get("/metrics").text)
        assert value(other, "autograd_lab_refusals_total", status="503", reason="busy") == 0


def test_an_outcome_is_a_kind_the_server_names_or_script_error():
    assert outcome_of({"error": None}) == "done"
    assert outcome_of({"error": {"type": "Timeout", "message": ""}}) == "Timeout"
    assert outcome_of({"error": {"type": "Stopped", "message": ""}}) == "stopped"
    # the class name is the script's to choose: never a label value of its own
    assert outcome_of({"error": {"type": "MyOwnError", "message": ""}}) == "ScriptError"
    assert outcome_of({"error": {"type": "ValueError", "message": ""}}) == "ScriptError"


def test_workers_that_die_before_ready_are_counted_and_shown_in_healthz(settings, tiny_dir):
    """A scenario run whose every worker is killed while it still imports torch (a real
    worker, SIGKILLed as the OOM killer would): SandboxFailed, each failed start counted by
    its stage, and /healthz names the last one."""
    import os
    import signal

    from app.runner.sandboxed_trace import START_ATTEMPTS

    # exec'd workers: a forked one is ready in a tenth of a second, before it could be killed
    app = create_app(settings(metrics=True, forkserver=False), scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as c:
        before = scrape(c.get("/metrics").text)
        assert c.get("/healthz").json()["workers"]["start_failures"]["last"] is None

        def killed(child) -> None:
            os.killpg(child.proc.pid, signal.SIGKILL)

        source = (tiny_dir / "tiny.py").read_text()
        doc = app.state.traces.scenarios.run(source, "tiny.py", [], "cpu", started=killed)
        assert doc["error"]["type"] == "SandboxFailed", doc["error"]
        after = scrape(c.get("/metrics").text)
        name = "autograd_lab_worker_start_failures_total"
        assert value(after, name, stage="run") - value(before, name, stage="run") == \
            START_ATTEMPTS - 1
        assert value(after, name, stage="gave_up") - value(before, name, stage="gave_up") == 1
        shown = c.get("/healthz").json()["workers"]["start_failures"]
        assert shown["gave_up"] == 1 and shown["run"] == START_ATTEMPTS - 1
        assert shown["last"]["stage"] == "gave_up" and shown["last"]["ago_s"] < 60


@pytest.mark.postgres
def test_the_shared_modes_database_pool_is_shown(settings, tiny_dir, postgres_url):
    from tests.postgres import fresh_database

    app = create_app(settings(metrics=True, database_url=fresh_database(postgres_url)),
                     scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as c:
        idle = scrape(c.get("/metrics").text)
        assert value(idle, "autograd_lab_db_pool_max") == 8  # the store's pool_size
        assert value(idle, "autograd_lab_db_pool_size") >= 1
        assert value(idle, "autograd_lab_db_pool_waiting") == 0
        # one connection held by a transaction here: lent out while the metrics are read
        with app.state.store.database.transaction():
            held = scrape(c.get("/metrics").text)
        assert value(held, "autograd_lab_db_pool_in_use") == \
            value(idle, "autograd_lab_db_pool_in_use") + 1
        assert ("autograd_lab_db_pool_request_errors_total", ()) in held
