"""One settings object: every setting documented, bad values refused at start."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from app.web import settings as settings_module
from app.web.settings import Settings, SettingsError


def test_every_setting_is_declared_with_its_meaning_and_the_docs_carry_the_table():
    """docs/settings.md's table is the declarations' own (regenerate it with settings_table())."""
    for f in fields(Settings):
        assert len(f.metadata.get("help", "")) > 10, f"{f.name} has no help"
    page = (Path(__file__).resolve().parents[2] / "docs" / "settings.md").read_text()
    begin, end = "<!-- settings-table: begin -->\n", "<!-- settings-table: end -->"
    assert begin in page and end in page
    copy = page[page.index(begin) + len(begin):page.index(end)]
    assert copy == settings_module.settings_table(), (
        "docs/settings.md's settings table differs from app/web/settings.py: paste "
        "settings_table() between its markers")
    for f in fields(Settings):
        assert f"`AUTOGRAD_LAB_{f.name.upper()}`" in copy


def test_serve_flags_restate_no_default(monkeypatch):
    """`serve` without --port takes AUTOGRAD_LAB_PORT (the flags once defaulted to 8000 and
    silently beat the variable); with neither, the declared default; a flag wins."""
    from app.cli import build_parser, serve_settings

    monkeypatch.setenv("AUTOGRAD_LAB_PORT", "9123")
    monkeypatch.setenv("AUTOGRAD_LAB_HOST", "127.0.0.2")
    args = build_parser().parse_args(["serve"])
    assert (serve_settings(args).host, serve_settings(args).port) == ("127.0.0.2", 9123)
    args = build_parser().parse_args(["serve", "--port", "9200"])
    assert serve_settings(args).port == 9200
    monkeypatch.delenv("AUTOGRAD_LAB_PORT")
    monkeypatch.delenv("AUTOGRAD_LAB_HOST")
    args = build_parser().parse_args(["serve"])
    assert serve_settings(args).port == Settings().port
    # the CLI's trace limit is the scenario limit the server uses, declared once
    trace = build_parser().parse_args(["trace", "x.py"])
    assert trace.timeout == Settings().trace_timeout


def test_environment_is_read_and_checked():
    s = Settings.from_env({"AUTOGRAD_LAB_TRACE_TIMEOUT": "5", "AUTOGRAD_LAB_PORT": "9000"})
    assert s.trace_timeout == 5.0 and s.port == 9000
    with pytest.raises(SettingsError, match="AUTOGRAD_LAB_PORT='x' is not a valid int"):
        Settings.from_env({"AUTOGRAD_LAB_PORT": "x"})
    with pytest.raises(SettingsError, match="port must be between"):
        Settings.from_env({"AUTOGRAD_LAB_PORT": "70000"})
    with pytest.raises(SettingsError, match="trace_timeout and upload_timeout must be positive"):
        Settings(trace_timeout=0)


def test_booleans_are_words_not_truthiness():
    """bool("0") is True; the setting must read 0/false/no/off as off."""
    assert Settings.from_env({"AUTOGRAD_LAB_SELFTEST": "0"}).selftest is False
    assert Settings.from_env({"AUTOGRAD_LAB_SELFTEST": "Yes"}).selftest is True
    with pytest.raises(SettingsError, match="AUTOGRAD_LAB_SELFTEST='maybe' is not a valid bool"):
        Settings.from_env({"AUTOGRAD_LAB_SELFTEST": "maybe"})
    assert Settings.from_env({}, token="t").token == "t"  # `serve --token` arrives this way


def test_uploads_run_three_per_core_with_a_fork_server_one_without(monkeypatch):
    """Forked workers are cheap to start: with a fork server, a few endless scripts cannot hold
    every upload worker (bench/classroom.py measures the room); exec'd ones stay one per core;
    an explicit setting wins either way."""
    from app.web.runs import trace_service as traces
    from app.web.runs.trace_service import TraceService

    monkeypatch.setattr(traces, "fork_server_supported", lambda: (True, "root"))
    assert TraceService(Settings(max_drawings=2)).uploads.gate.workers == 6
    assert TraceService(Settings(max_drawings=2, forkserver=False)).uploads.gate.workers == 2
    assert TraceService(Settings(max_drawings=2, upload_workers=3)).uploads.gate.workers == 3
    monkeypatch.setattr(traces, "fork_server_supported", lambda: (False, "no user namespaces"))
    service = TraceService(Settings(max_drawings=2))
    assert service.uploads.gate.workers == 2
    # /healthz says runs start fresh workers, and why
    assert service.workers()["forked"] is False
    assert "no user namespaces" in service.workers()["detail"]
    with pytest.raises(SettingsError):
        Settings(upload_workers=-1)


def test_the_store_and_the_classroom_take_their_defaults_from_the_declarations():
    """They once restated 500, 256 MiB, 16 MiB and 50 beside the settings."""
    import inspect

    from app.web.classes.in_process import InProcessClassroom as Classroom
    from app.web.store.sqlite import RunStore

    store = inspect.signature(RunStore).parameters
    s = Settings()
    assert (store["max_runs"].default, store["max_bytes"].default,
            store["max_run_bytes"].default) == (s.store_max_runs, s.store_max_bytes,
                                                s.store_max_run_bytes)
    assert inspect.signature(Classroom).parameters["max_sessions"].default == s.max_classes


def test_ended_class_retention_is_days_or_zero_for_ever():
    assert Settings.from_env({}).ended_class_retention_days == 30
    assert Settings.from_env({"AUTOGRAD_LAB_ENDED_CLASS_RETENTION_DAYS": "0"}
                             ).ended_class_retention_days == 0
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SettingsError, match="ended_class_retention_days"):
            Settings.from_env({"AUTOGRAD_LAB_ENDED_CLASS_RETENTION_DAYS": bad})


def test_all_runs_share_three_quarters_of_the_machine_unless_told_otherwise():
    from app.web.runs.trace_service import TraceService

    meminfo = Path("/proc/meminfo").read_text()
    total = int(next(line for line in meminfo.splitlines()
                     if line.startswith("MemTotal:")).split()[1]) * 1024
    auto = TraceService(Settings(forkserver=False)).all_runs_memory_bytes()
    assert Settings().run_memory_mb << 20 <= auto <= total * 3 // 4
    told = TraceService(Settings(forkserver=False, all_runs_memory_mb=4096))
    assert told.all_runs_memory_bytes() == 4096 << 20
    with pytest.raises(SettingsError, match="all_runs_memory_mb"):
        Settings(all_runs_memory_mb=600, run_memory_mb=1024)


def test_a_setting_set_under_its_former_name_still_applies_and_the_new_name_is_said(caplog):
    from app.web.settings import FORMER_NAMES

    assert set(FORMER_NAMES.values()) <= {f.name for f in fields(Settings)}
    assert not set(FORMER_NAMES) & {f.name for f in fields(Settings)}
    with caplog.at_level("WARNING", logger="app.web.settings"):
        settings = Settings.from_env({"AUTOGRAD_LAB_MAX_WORKERS": "3",
                                      "AUTOGRAD_LAB_WARM_LESSONS": "false",
                                      "AUTOGRAD_LAB_LESSON_WORKERS": "2"})
    assert (settings.max_drawings, settings.warm_scenarios, settings.scenario_workers) == \
        (3, False, 2)
    assert "AUTOGRAD_LAB_MAX_WORKERS is now called AUTOGRAD_LAB_MAX_DRAWINGS" in caplog.text
    # the new name, where both are set, is the one that counts
    both = Settings.from_env({"AUTOGRAD_LAB_MAX_WORKERS": "3", "AUTOGRAD_LAB_MAX_DRAWINGS": "5"})
    assert both.max_drawings == 5


def test_the_token_can_come_from_a_file_and_a_flag_says_ps_shows_it(tmp_path, monkeypatch,
                                                                     capsys):
    from app.cli import build_parser, serve_settings

    monkeypatch.delenv("AUTOGRAD_LAB_TOKEN", raising=False)
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    args = build_parser().parse_args(["serve", "--token-file", str(secret)])
    assert serve_settings(args).token == "s3cret"
    monkeypatch.setenv("AUTOGRAD_LAB_TOKEN_FILE", str(secret))
    assert serve_settings(build_parser().parse_args(["serve"])).token == "s3cret"
    monkeypatch.delenv("AUTOGRAD_LAB_TOKEN_FILE")
    assert capsys.readouterr().err == ""
    assert serve_settings(build_parser().parse_args(["serve", "--token", "x"])).token == "x"
    assert "visible to every user of this machine" in capsys.readouterr().err
    (tmp_path / "empty").write_text("\n")
    for path, words in ((tmp_path / "empty", "is empty"), (tmp_path / "none", "cannot read")):
        with pytest.raises(SystemExit, match=words):
            serve_settings(build_parser().parse_args(["serve", "--token-file", str(path)]))
