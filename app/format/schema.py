"""The Trace's JSON Schema and the one validator every untrusted document goes through.

The worker's report is written by the process that ran the script, so a hostile script can
write it itself: the runner checks every report against the whole schema before anyone reads
it. The schema is compiled once per process (fastjsonschema turns it into Python code: about a
second to compile, then fast enough for a large trace) with no remote references allowed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import fastjsonschema

__all__ = ["SCHEMA_PATH", "InvalidTrace", "load_schema", "validate"]

SCHEMA_PATH = Path(__file__).with_name("trace.schema.json")


class InvalidTrace(ValueError):
    """A document that is not a Trace; the message says which part is wrong."""


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _compiled():
    schema = load_schema()
    # fastjsonschema knows drafts 4 to 7 and resolves `$id` as a URL to fetch: the copy it
    # compiles names draft 7 (the keywords used here mean the same there) and has no `$id`
    schema.pop("$id", None)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return fastjsonschema.compile(schema, handlers={}, use_formats=False)


def validate(doc: object) -> None:
    """Raise InvalidTrace unless `doc` is a Trace document as the schema describes it."""
    try:
        _compiled()(doc)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise InvalidTrace(exc.message) from None
    except RecursionError:
        raise InvalidTrace("data is nested too deeply") from None
