"""JSON text of the documents this program built itself (a Trace the worker reports, a run the
store keeps), written fast.

orjson writes a 48-layer encoder's 6.6 MB Trace in 6 ms; json's C encoder takes 127 ms, and a
run was encoded twice on its way to the page (the worker's report, the stored copy). Where
orjson refuses what json writes (a lone surrogate in a string the script wrote, an integer
past 64 bits, a key that is not a string), json's encoder writes it as before.

orjson's writer cannot fail cleanly: an allocation it cannot make kills the process (SIGSEGV;
json raises MemoryError). The server has no address-space limit; a worker has one, and the
script decides how much of it is left, so the worker asks for json's encoder (`fast=False`)
when its room is short (worker.py `_report_text`).

The text is compact UTF-8. orjson writes a NaN or infinity as null (json would write `NaN`,
which is not JSON); the Trace spells them out as strings before they get here (summary.py).
Text from outside (a worker's report, a stored row) is still parsed with json: orjson reads a
longer integer as a float, and the supervisor's handling of surrogate escapes is json's.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "dumps_indented"]


def dumps(value: Any, fast: bool = True) -> bytes:
    """`value` as compact JSON text, UTF-8 encoded; `fast=False`: through json's encoder
    (slower, but it raises MemoryError where orjson would crash)."""
    if fast:
        try:
            return orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError is one
            pass
    # ASCII escapes: a lone surrogate is written as "\\ud800", as before
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def dumps_indented(value: Any) -> bytes:
    """`value` as indented JSON text for a person to read (the CLI's Trace file), UTF-8.
    json's encoder with `indent` is its pure-Python one: 1.2 s of a CLI run's CPU for a
    3.6 MB Trace (issue 36, the fixed cost of a traced run); orjson writes it in milliseconds.
    What orjson refuses is written by json's encoder, as `dumps` does."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except TypeError:
        return json.dumps(value, indent=1).encode("ascii")
