"""Scenario metadata is read from the scripts without running them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.catalog import (
    RESERVED_QUERY_NAMES,
    SHOW_KINDS,
    OptionError,
    ScenarioError,
    UnknownVariant,
    load_catalog,
    parse_scenario,
    scenario_args,
)
from tests.conftest import ROOT


def test_docstring_and_literals_are_read_without_running(tmp_path):
    path = tmp_path / "scenario.py"
    path.write_text('"""Title here\n\nQuestion: why?\n\nAnswer: because.\n\nMore words."""\n'
                    'VARIANTS = {"a": "first", "b": "second"}\n'
                    'OPTIONS = {"k": {"default": 1, "choices": [1, 2]}}\n'
                    'raise SystemExit("running this would fail")\n')
    sc = parse_scenario(path)
    assert (sc.title, sc.question, sc.answer) == ("Title here", "why?", "because.")
    assert sc.default_variant == "a"
    assert scenario_args(sc, None, {}) == ["--variant", "a"]
    assert scenario_args(sc, "b", {"k": "2"}) == ["--variant", "b", "--k", "2"]
    with pytest.raises(UnknownVariant, match="no variant 'c'.*a, b"):
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


@pytest.mark.parametrize("option", ["variant", "device", "event", "node", "step"])
def test_an_option_named_like_a_page_parameter_is_refused(tmp_path, option):
    path = tmp_path / "scenario.py"
    path.write_text(f'"""Title"""\nOPTIONS = {{"{option}": {{"default": 1}}}}\n')
    with pytest.raises(ScenarioError, match=f"scenario.py: option '{option}'.*rename it"):
        parse_scenario(path)


def test_the_reserved_names_are_the_page_s_own_query_parameters():
    """static/js/permalink.js writes these into the page's address; one more there must be
    reserved here too, or an option of that name would be read as both."""
    js = (Path(__file__).resolve().parent.parent / "static/js/permalink.js").read_text()
    keys = set()
    for name in ("VIEW_KEYS", "RUN_KEYS"):
        listed = re.search(rf"const {name} = \[([^\]]*)\]", js)
        assert listed, name
        keys |= set(re.findall(r'"(\w+)"', listed.group(1)))
    assert keys | {"fold", "view", "font"} == set(RESERVED_QUERY_NAMES)  # the graph API's


def test_show_lines_become_steps_and_leave_the_text(tmp_path):
    path = tmp_path / "scenario.py"
    path.write_text('"""Title\n\nQuestion: why?\nShow: param w; line 3\n\nMore `code`.\n'
                    'Show: node MulBackward0; line y = w * 2\n"""\n'
                    'CLASS_QUESTION = {"prompt": "How many?", "choices": ["1", "2"], '
                    '"answer": 1}\n')
    sc = parse_scenario(path)
    assert sc.question == "why?"
    assert "Show" not in sc.narration
    assert [s["show"] for s in sc.steps] == [
        [{"param": "w"}, {"line": 3}], [{"node": "MulBackward0"}, {"line": "y = w * 2"}]]
    assert sc.class_question == {"prompt": "How many?", "choices": ["1", "2"], "answer": 1}


def test_a_diagnostic_and_a_heat_map_are_targets_too(tmp_path):
    path = tmp_path / "scenario.py"
    path.write_text('"""T\n\nLook.\nShow: heatmap fc.weight; diagnostic no_gradient\n"""\n')
    assert parse_scenario(path).steps[0]["show"] == [{"heatmap": "fc.weight"},
                                                     {"diagnostic": "no_gradient"}]


def test_every_kind_the_catalogue_takes_is_one_presenter_mode_shows():
    """The catalogue refuses any other kind (below), so a step never points at what presenter
    mode cannot bring on screen: each kind is read by presenter.js's stepView or presenterShows
    (tests/browser/test_presenter_targets.py checks that they are on a projector's screen)."""
    js = (ROOT / "static" / "js" / "presenter.js").read_text(encoding="utf-8")
    for kind in SHOW_KINDS:
        assert re.search(rf"item\.{kind}\b", js), f"presenter.js never shows `Show: {kind}`"


@pytest.mark.parametrize("source", [
    '"""T\n\nText.\nShow: colour red\n"""\n',
    '"""T\n\nText.\nShow: param\n"""\n',
    '"""T\n\nText.\nShow: heatmap\n"""\n',
    '"""T\n\nText.\nShow: figure 1\n"""\n',
    '"""T"""\nCLASS_QUESTION = {"prompt": "p", "choices": ["only"], "answer": 0}\n',
    '"""T"""\nCLASS_QUESTION = {"prompt": "p", "choices": ["a", "b"], "answer": 2}\n',
])
def test_a_bad_show_line_or_class_question_is_refused_with_the_file_named(tmp_path, source):
    path = tmp_path / "scenario.py"
    path.write_text(source)
    with pytest.raises(ScenarioError, match="scenario.py"):
        parse_scenario(path)
