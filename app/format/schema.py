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

__all__ = ["SCHEMA_PATH", "InvalidTrace", "deeper_than", "load_schema", "validate"]

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


def validate(doc: object) -> None:
    """Raise InvalidTrace unless `doc` is a Trace document as the schema describes it."""
    if deeper_than(doc, MAX_DEPTH):
        raise InvalidTrace(f"data is nested more than {MAX_DEPTH} deep")
    try:
        _compiled().validate(doc)
    except jsonschema_rs.ValidationError as exc:
        raise InvalidTrace(f"{_where(list(exc.instance_path))}: {_why(exc)}") from None
    except (RecursionError, ValueError) as exc:  # nested past what the validator walks
        raise InvalidTrace(f"data cannot be checked: {str(exc)[:200]}") from None
