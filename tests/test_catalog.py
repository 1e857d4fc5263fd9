"""Scenario metadata is read from the scripts without running them."""

from __future__ import annotations

import pytest

from app.catalog import OptionError, load_catalog, parse_scenario, scenario_args


def test_docstring_and_literals_are_read_without_running(tmp_path):
    path = tmp_path / "lesson.py"
    path.write_text('"""Title here\n\nQuestion: why?\n\nAnswer: because.\n\nMore words."""\n'
                    'VARIANTS = {"a": "first", "b": "second"}\n'
                    'OPTIONS = {"k": {"default": 1, "choices": [1, 2]}}\n'
                    'raise SystemExit("running this would fail")\n')
    sc = parse_scenario(path)
    assert (sc.title, sc.question, sc.answer) == ("Title here", "why?", "because.")
    assert sc.default_variant == "a"
    assert scenario_args(sc, None, {}) == ["--variant", "a"]
    assert scenario_args(sc, "b", {"k": "2"}) == ["--variant", "b", "--k", "2"]
    with pytest.raises(OptionError, match="no variant 'c'.*a, b"):
        scenario_args(sc, "c", {})
    with pytest.raises(OptionError, match="must be one of 1, 2"):
        scenario_args(sc, None, {"k": "3"})
    with pytest.raises(OptionError, match="no option 'z'"):
        scenario_args(sc, None, {"z": "1"})


def test_every_shipped_scenario_has_title_question_and_answer():
    catalog = load_catalog()
    assert "reused_layer" in catalog
    for sc in catalog.values():
        assert sc.title and sc.question and sc.answer, sc.name
