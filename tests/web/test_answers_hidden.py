"""A scenario's CLASS_QUESTION keeps its answer on the server until the teacher reveals it
(issue 38: the scenario page's source and /api/scenarios/NAME/trace carried `CLASS_QUESTION …
"answer": 1`). The test walks the app's own routes, so that a route added later that serves a
scenario's source, Trace or drawing is fetched here too: every GET route with a scenario name
in its path, and the pages that list the scenarios. A path parameter it does not know fails
the test with its name, rather than leaving the route out."""

from __future__ import annotations

import ast
import html
import json
import re
import textwrap

import fastapi.routing
import pytest
from fastapi.testclient import TestClient

from app.catalog import without_class_question
from app.web.app import create_app
from app.web.http.responses import MEDIA

from .conftest import LOCAL, TINY

SECRET = "SECRET-7f3a-the-answer-is-two"
QUESTION = f'''\
# asked of a class before the graph is explained
CLASS_QUESTION = {{"prompt": "How many gradient terms reach the layer's weight?",
                  "choices": ["one", "two", "three"],
                  "answer": 1,  # {SECRET}
                  }}  # two, one per use
'''
# the question sits among the script's lines: a Trace's lines must still be the file's
SCRIPT = textwrap.dedent(TINY).replace("\nparser = ", "\n" + QUESTION + "\nparser = ", 1)
LISTINGS = ("/", "/api/scenarios")  # the scenarios listed, without a name in the path
VALUES = {"fmt": sorted(MEDIA)}  # each value a path parameter other than the name takes


@pytest.fixture(scope="module")
def app(tmp_path_factory, settings):
    folder = tmp_path_factory.mktemp("scenarios")
    (folder / "asked.py").write_text(SCRIPT, encoding="utf-8")
    return create_app(settings(), scenarios_dir=folder)


@pytest.fixture(scope="module")
def student(app):
    with TestClient(app, client=LOCAL) as c:
        yield c


def _routes(app) -> list:
    """The app's routes, each with its whole path: FastAPI 0.16x keeps an included router as
    one entry of `app.routes` and walks it with `iter_route_contexts`; before, `app.routes`
    held every route itself."""
    walk = getattr(fastapi.routing, "iter_route_contexts", None)
    return list(walk(app.routes)) if walk else list(app.routes)


def _paths(app) -> list[str]:
    """Every GET path that can serve a scenario: those with {name}, each other path parameter
    filled with each value it takes, and the listings."""
    paths = list(LISTINGS)
    for route in _routes(app):
        if "GET" not in (route.methods or ()) or "{name}" not in (route.path or ""):
            continue
        params = set(re.findall(r"{(\w+)(?::\w+)?}", route.path)) - {"name"}
        unknown = params - set(VALUES)
        assert not unknown, f"{route.path}: give this test the values of {sorted(unknown)}"
        filled = [route.path.replace("{name}", "asked")]
        for param in sorted(params):
            filled = [p.replace(f"{{{param}}}", v) for p in filled for v in VALUES[param]]
        paths += filled
    return paths


def _text(body: bytes, media: str) -> str:
    """What a reader of the body sees: every JSON string at any depth (a Trace carries the
    source as one, with its quotes escaped), HTML unescaped and also without its tags, anything
    else as text."""
    if media.startswith("application/json"):
        found: list[str] = []

        def walk(value) -> None:
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, dict):
                for k, v in value.items():
                    found.append(k)
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(json.loads(body))
        return "\n".join(found)
    text = body.decode("utf-8", errors="replace")
    # a highlighted listing splits a line into spans: read it with and without the markup
    return html.unescape(text) + "\n" + html.unescape(re.sub(r"<[^>]*>", "", text))


def test_every_route_covers_the_scenario_routes(app):
    """The walk finds the routes this app has now: the page, its compare page, the API's
    summary, Trace, gradient flow and each drawing format (a guard on the walk itself)."""
    paths = _paths(app)
    for expected in ("/scenarios/asked", "/scenarios/asked/compare", "/api/scenarios/asked",
                     "/api/scenarios/asked/trace", "/api/scenarios/asked/gradient-flow",
                     "/api/scenarios/asked/graph.svg", "/api/scenarios/asked/graph.dot"):
        assert expected in paths


def test_no_route_serves_the_class_questions_answer(app, student):
    carries_source = []
    for path in _paths(app):
        answer = student.get(path)
        assert answer.status_code == 200, (path, answer.text[:300])
        seen = _text(answer.content, answer.headers.get("content-type", ""))
        assert SECRET not in seen, path
        assert not re.search(r"CLASS_QUESTION\s*[:=]", seen), path
        assert not re.search(r"""["']answer["']\s*:\s*1\b""", seen), path
        assert "two, one per use" not in seen, path
        if "layer = torch.nn.Linear(3, 3)" in seen:
            carries_source.append(path)
    # the routes that serve the script did serve it: the checks above read the source
    assert {"/scenarios/asked", "/api/scenarios/asked/trace"} <= set(carries_source)


def test_the_scenario_still_runs_its_lines_where_the_file_has_them(student):
    """The question's lines are taken out, not closed up: the Trace's lines are the file's,
    and its source is the file's but for the question."""
    doc = student.get("/api/scenarios/asked/trace").json()
    assert doc["error"] is None
    served = doc["script"]["source"]
    assert served == without_class_question(SCRIPT)
    assert served.count("\n") == SCRIPT.count("\n")
    lines = SCRIPT.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("CLASS_QUESTION"))
    question = range(first, first + 4)  # its four lines
    changed = [i for i, (a, b) in enumerate(zip(lines, served.split("\n"), strict=True))
               if a != b]
    assert changed == list(question)
    # and the run's lines are the file's: the loss is computed on the file's last line but one
    loss_line = lines.index("loss = h.pow(2).sum() * args.scale") + 1
    assert loss_line in _lines(doc["events"])


def _lines(value) -> set[int]:
    """Every script line a part of the Trace names."""
    if isinstance(value, dict):
        found = {value["line"]} if isinstance(value.get("line"), int) else set()
        return found.union(*(_lines(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_lines(v) for v in value))
    return set()


@pytest.mark.parametrize("script", [
    'x = 1; CLASS_QUESTION = {"answer": 1}; y = 2\nprint(x, y)\n',
    'x = 1; CLASS_QUESTION = {"prompt": "p",\n "answer": 2}; y = 2\nprint(x + y)\n',
    'CLASS_QUESTION: dict = {"answer": 1}  # it is 1\n'
    'z = "\u00e9"; CLASS_QUESTION = {"\u00e9": 1}\n',  # columns in UTF-8 bytes
    QUESTION + "print('after')\n",
])
def test_without_class_question_keeps_a_script_that_runs_with_its_lines(script):
    out = without_class_question(script)
    assert "CLASS_QUESTION" not in out and "answer" not in out and "it is 1" not in out
    assert out.count("\n") == script.count("\n")
    compile(out, "scenario.py", "exec")
    # every other statement is where it was
    kept = [(n.lineno, ast.unparse(n)) for n in ast.parse(out).body if ast.unparse(n) != "pass"]
    wanted = [(n.lineno, ast.unparse(n)) for n in ast.parse(script).body
              if "CLASS_QUESTION" not in ast.unparse(n)]
    assert kept == wanted


def test_the_real_scenarios_with_a_question_are_served_without_it():
    """Each teaching scenario that asks a question: what is served and run has not got it,
    and compiles with the file's lines (the route walk above runs a scenario of its own)."""
    from app.catalog import load_catalog
    from tests.conftest import SCENARIOS

    asking = [s for s in load_catalog(SCENARIOS).values() if s.class_question]
    assert asking, "no scenario asks a question: the test has nothing to bite on"
    for scenario in asking:
        served, text = scenario.source(), scenario.path.read_text(encoding="utf-8")
        assert "CLASS_QUESTION" in text and "CLASS_QUESTION" not in served
        assert served.count("\n") == text.count("\n")
        compile(served, scenario.path.name, "exec")
