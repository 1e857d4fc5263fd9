"""Every scenario, every variant: runs standalone, has its narration, traces cleanly."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from app.catalog import load_catalog
from app.format import load_schema
from tests.conftest import ROOT, SCENARIOS
from tests.trace_facts import backward_events

CATALOG = load_catalog(SCENARIOS)
CASES = [(name, variant) for name, s in CATALOG.items() for variant in (s.variants or [None])]
IDS = [f"{name}-{variant}" if variant else name for name, variant in CASES]

# The issue's list: the library is not complete without each of these.
EXPECTED = {"reused_layer", "weight_dropout", "stop_gradient", "masked_gradient", "custom_function",
            "grad_accumulation", "retain_graph", "inplace_version", "double_backward",
            "tensor_hooks", "no_grad_inference_detach", "checkpointing", "compiled_backward",
            "mixed_precision"}


def argv(variant: str | None) -> list[str]:
    return ["--variant", variant] if variant else []


# Two scripts that must fail, so the runner below is seen to report failures too.
FAILING = {"raises.py": ("import torch\nraise ValueError('boom')\n", 1),
           "exits.py": ("import sys\nprint('bye')\nsys.exit(3)\n", 3)}


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """Every case run as `python scenarios/NAME.py [--variant V]` would run it, each in a fresh
    process forked from one that imported torch once (tests/scenarios/standalone.py)."""
    cases = [[str(SCENARIOS / f"{name}.py"), argv(variant)] for name, variant in CASES]
    folder = tmp_path_factory.mktemp("failing")
    for file, (code, _) in FAILING.items():
        (folder / file).write_text(code)
        cases.append([str(folder / file), []])
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("standalone.py"))],
                          input=json.dumps(cases), cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=True)
    return dict(zip(CASES + list(FAILING), json.loads(done.stdout), strict=True))


def test_the_runner_reports_failures(standalone):
    for file, (_, code) in FAILING.items():
        assert standalone[file]["returncode"] == code
    assert "ValueError: boom" in standalone["raises.py"]["stderr"]
    assert standalone["exits.py"]["stdout"] == "bye\n"


# `python scenarios/NAME.py`, literally: the command a teacher types. A fresh interpreter costs
# two seconds of torch import, so two scenarios are run this way (one without variants, one
# with), to confirm the forked runs above behave exactly like it.
AS_TYPED = ["masked_gradient", "retain_graph"]


@pytest.fixture(scope="module")
def as_typed():
    def run(name):
        return subprocess.run([sys.executable, f"scenarios/{name}.py"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(AS_TYPED, pool.map(run, AS_TYPED), strict=True))


def test_the_library_has_every_scenario_the_issue_lists():
    assert EXPECTED <= set(CATALOG)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_runs_standalone(standalone, case):
    result = standalone[case]
    assert result["returncode"] == 0, result["stderr"]
    assert "Traceback" not in result["stderr"]
    assert result["stdout"].strip(), "a scenario prints what it shows"


@pytest.mark.parametrize("name", AS_TYPED)
def test_runs_as_typed(as_typed, standalone, name):
    result = as_typed[name]
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    default = (name, CATALOG[name].default_variant)
    assert result.stdout == standalone[default]["stdout"]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_narration_gives_title_question_answer(name):
    s = CATALOG[name]
    assert s.title and s.title != name.replace("_", " ")
    assert s.question.endswith("?"), s.question
    assert len(s.answer.split()) >= 15, s.answer
    assert "What to look at:" in s.narration
    for variant, description in s.variants.items():
        assert variant.isidentifier() and description


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_traces_cleanly(traced, case):
    name, variant = case
    doc = traced(name, *argv(variant))
    jsonschema.validate(doc, load_schema())
    assert doc["error"] is None, doc["error"]
    events = backward_events(doc)
    assert events and not any(e["synthetic"] for e in events), "the script calls backward itself"
    codes = {d["code"] for d in doc["diagnostics"]}
    assert not codes & {"tracer_error", "events_skipped"}, doc["diagnostics"]
    assert doc["stdout"].strip()


@pytest.mark.parametrize("name", [n for n, s in CATALOG.items() if s.variants])
def test_first_variant_is_the_default(traced, name):
    """Without --variant a scenario shows what the page shows for its first variant."""
    default = traced(name)
    first = traced(name, "--variant", CATALOG[name].default_variant)
    assert default["stdout"] == first["stdout"]
    assert [nodes(e) for e in backward_events(default)] == \
        [nodes(e) for e in backward_events(first)]


def nodes(event: dict) -> list[dict]:
    """A backward's nodes, a compiled region's id left out: it is AOTAutograd's aot_id, which
    counts on across the runs of one process (these tests trace in-process; a worker runs one
    script), so the same script traced twice here numbers its region anew."""
    return [{k: v for k, v in n.items() if k != "compiled_region"} for n in event["graph"]["nodes"]]


SEED_SCENARIOS = ("reused_layer", "weight_dropout", "stop_gradient", "masked_gradient",
                "custom_function", "compiled_backward")


@pytest.mark.parametrize("name", SEED_SCENARIOS)
def test_presenter_steps_point_at_what_the_scenario_records(traced, name):
    """Each seed scenario's `Show:` lines name a parameter the run has (for its heat map too), a
    node some backward graph of the default variant contains, a finding it reports, and a source
    line that exists: presenter mode highlights them, so a renamed layer or an edited line must
    fail here, not silently on the projector."""
    scenario = CATALOG[name]
    shows = [item for step in scenario.steps for item in step["show"]]
    assert shows, f"{name} points presenter mode at nothing"
    doc = traced(name)
    names = {n["name"] for ev in backward_events(doc) for n in ev["graph"]["nodes"]}
    source = scenario.path.read_text(encoding="utf-8")
    lines = source.splitlines()
    docstring_end = ast.parse(source).body[0].end_lineno
    codes = {d["code"] for d in doc["diagnostics"]}
    for item in shows:
        if "param" in item or "heatmap" in item:
            assert item.get("param", item.get("heatmap")) in doc["params"], item
        elif "diagnostic" in item:
            assert item["diagnostic"] in codes, (item, sorted(codes))
        elif "node" in item:
            assert item["node"] in names, (item, sorted(names))
        elif isinstance(item["line"], int):
            assert 1 <= item["line"] <= len(lines), item
        else:
            # the page takes the first line with the text outside the Show lines (source.js)
            found = [i for i, text in enumerate(lines, 1)
                     if item["line"] in text and not text.lstrip().startswith("Show:")]
            assert found and found[0] > docstring_end, item
    # the Show lines are not part of what the page and the index card say
    assert "Show:" not in scenario.narration and "Show:" not in scenario.question
