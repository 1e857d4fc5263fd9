"""The Trace's JSON Schema and the one validator every untrusted document goes through.

The worker's report is written by the process that ran the script, so a hostile script can
write it itself: the runner checks every report against the whole schema before anyone reads
it. The validator is jsonschema-rs (Rust), built once per process, offline (no remote
reference is fetched), with the schema's own draft (2020-12). It replaced fastjsonschema, whose
generated Python spent 0.9 s of a 48-layer encoder's 3 s on the way to the page (a function
call and a formatted name per number): jsonschema-rs checks the same 6.6 MB document in about
15 ms (bench/paste_to_picture.py). Error messages never echo the document's own values: they
are the script's, and may be huge or hostile.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema_rs

__all__ = ["DETAIL_MAX_BYTES", "SCHEMA_PATH", "InvalidTrace", "deeper_than", "load_schema",
           "shallow_problem", "validate"]

SCHEMA_PATH = Path(__file__).with_name("trace.schema.json")


class InvalidTrace(ValueError):
    """A document that is not a Trace; the message says which part is wrong."""


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _compiled():
    return jsonschema_rs.validator_for(load_schema(), validate_formats=False, offline=True,
                                       mask="a value")


# deeper than any Trace is (a tensor has at most 64 dimensions): the validator's walk is
# recursive Rust, and a forged document nested 100,000 deep must be refused, not crash the server
MAX_DEPTH = 200


def deeper_than(doc: object, limit: int) -> bool:
    """Whether JSON data nests more than `limit` levels, found without recursion: about
    20 ms for a 48-layer encoder's 6.6 MB Trace (notebook.py uses it on uploads too)."""
    stack = [(doc, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        kind = type(item)
        children = item.values() if kind is dict else item if kind in (list, tuple) else ()
        stack.extend((c, depth + 1) for c in children if type(c) in (dict, list, tuple))
    return False


def _where(path: list) -> str:
    """Where in the document: keys are the script's (a parameter's name may be a megabyte),
    so each is clipped, and so is the whole."""
    def part(p: object) -> str:
        if isinstance(p, int):
            return f"[{p}]"
        text = str(p)
        return "." + (text if len(text) <= 40 else text[:40] + "…")
    where = "data" + "".join(part(p) for p in path[:12])
    return where + (".…" if len(path) > 12 else "")


# kinds whose message quotes the document's own property names (the mask covers values only)
_NAMES_PROPERTIES = {"AdditionalProperties": "has a property the schema does not allow",
                     "UnevaluatedProperties": "has a property the schema does not allow",
                     "PropertyNames": "has a property name the schema does not allow"}


def _why(exc: jsonschema_rs.ValidationError) -> str:
    kind = type(exc.kind).__name__
    return _NAMES_PROPERTIES.get(kind) or exc.message[:200]


# a failed validate() hands back the failing part of the document as Python objects, made
# anew: for a forged 29.6 MB report failing at its top (a required key missing) that was 1.4 GB
# and 7.6 s, about 48 MB a MiB. Past this size a report is refused with the cheap checks'
# words, or the schema's without the place (is_valid stops at the first problem, copies nothing)
DETAIL_MAX_BYTES = 256 * 1024

_JSON_TYPES = {"object": (dict,), "array": (list,), "string": (str,), "null": (type(None),),
               "boolean": (bool,), "integer": (int,), "number": (int, float)}


def _kind_problem(value: object, rule: dict) -> str | None:
    """What one value breaks of the plain keywords of its rule (type, const, sizes): the cheap
    checks, no walk into what it holds."""
    kinds = rule.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        ok = any(isinstance(value, _JSON_TYPES[k]) and not (isinstance(value, bool) and
                 k in ("integer", "number")) for k in kinds)
        if not ok:
            return f"is not of type {' or '.join(kinds)}"
    if "const" in rule and value != rule["const"]:
        return "is not the value the schema requires"
    for key, kind, what in (("maxItems", list, "items"), ("maxLength", str, "characters"),
                            ("maxProperties", dict, "properties")):
        if key in rule and isinstance(value, kind) and len(value) > rule[key]:
            return f"has more than {rule[key]:,} {what}"
    return None


def shallow_problem(doc: object) -> str | None:
    """The cheap checks first: the document's top and each of its known keys' kind and size,
    in microseconds, so that most junk is refused before the whole schema walks it."""
    schema = load_schema_cached()
    if not isinstance(doc, dict):
        return "data is not a JSON object"
    for key in schema.get("required", ()):
        if key not in doc:
            return f'data: "{key}" is a required property'
    for key, rule in schema["properties"].items():
        if key in doc:
            problem = _kind_problem(doc[key], rule)
            if problem:
                return f"data.{key}: {problem}"
    return None


@functools.lru_cache(maxsize=1)
def load_schema_cached() -> dict[str, Any]:
    return load_schema()


def validate(doc: object, size: int | None = None) -> None:
    """Raise InvalidTrace unless `doc` is a Trace document as the schema describes it. `size`:
    the bytes it was parsed from, when known; past DETAIL_MAX_BYTES a failure is not located
    (finding the place copies the failing part)."""
    problem = shallow_problem(doc)
    if problem:
        raise InvalidTrace(problem)
    if deeper_than(doc, MAX_DEPTH):
        raise InvalidTrace(f"data is nested more than {MAX_DEPTH} deep")
    try:
        if _compiled().is_valid(doc):
            return
        if size is not None and size > DETAIL_MAX_BYTES:
            raise InvalidTrace(f"data does not follow the schema (a report over "
                               f"{DETAIL_MAX_BYTES >> 10} KiB is not searched for where)")
        _compiled().validate(doc)
    except jsonschema_rs.ValidationError as exc:
        raise InvalidTrace(f"{_where(list(exc.instance_path))}: {_why(exc)}") from None
    except (RecursionError, ValueError) as exc:  # nested past what the validator walks
        raise InvalidTrace(f"data cannot be checked: {str(exc)[:200]}") from None
