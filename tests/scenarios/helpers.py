"""Small lookups the scenario tests share: script lines, graph nodes, edges."""

from __future__ import annotations

import ast
import contextlib
import io
import runpy
import sys

from tests.conftest import SCENARIOS


def source_of(name: str) -> str:
    return (SCENARIOS / f"{name}.py").read_text(encoding="utf-8")


def line_of(name: str, text: str) -> int:
    """The one line of scenarios/NAME.py's code (not its docstring) that contains `text`."""
    source = source_of(name)
    docstring_end = ast.parse(source).body[0].end_lineno
    hits = [i for i, line in enumerate(source.splitlines(), 1)
            if text in line and i > docstring_end]
    assert len(hits) == 1, f"{text!r} is on lines {hits} of {name}.py, expected exactly one"
    return hits[0]


def method_source(name: str, cls: str, method: str) -> tuple[int, str]:
    """(first line, decorators included; source text of the def) of `cls.method` in
    scenarios/NAME.py, read with ast."""
    source = source_of(name)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    first = min([d.lineno for d in item.decorator_list] + [item.lineno])
                    return first, ast.get_source_segment(source, item)
    raise AssertionError(f"{cls}.{method} not found in {name}.py")


def nodes_named(event: dict, name: str) -> list[dict]:
    return [n for n in event["graph"]["nodes"] if n["name"] == name]


def node_by_id(event: dict, node_id: str) -> dict:
    return next(n for n in event["graph"]["nodes"] if n["id"] == node_id)


def edges(event: dict, source: str | None = None, target: str | None = None) -> list[dict]:
    return [e for e in event["graph"]["edges"]
            if (source is None or e["source"] == source)
            and (target is None or e["target"] == target)]


def flagged(doc: dict, code: str) -> dict[str, str]:
    """param name -> message, for every diagnostic with this code."""
    return {p: d["message"] for d in doc["diagnostics"] if d["code"] == code for p in d["params"]}


def run_plainly(name: str, *argv: str) -> dict:
    """The scenario run as `python scenarios/NAME.py ARGV` would run it (in this process,
    without the tracer, its prints swallowed): its module globals."""
    path = SCENARIOS / f"{name}.py"
    saved = list(sys.argv)
    sys.argv[:] = [str(path), *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv[:] = saved
