"""The Trace a notebook stores in a traced cell's output: bounded. The whole Trace of a 6-layer
encoder's training step is megabytes (tensors' values, every pass's graph), and a notebook
keeps every output it shows; the output keeps what its picture and the live view's pass need:
the pass drawn, without the tensors' values (their statistics stay), and says what went.
`%%autograd_lab --whole` (or `show(..., whole=True)`) keeps the whole.

The live view gets the whole Trace from the kernel while it runs; only the stored copy is cut.
"""

from __future__ import annotations

import json

import orjson

from app.format import diagnostic, json_text
from app.format.shrink import drop_values

__all__ = ["bounded_trace", "BOUNDED_CODE"]

BOUNDED_CODE = "notebook_trace_bounded"


def bounded_trace(doc: dict, keep_event: int | None) -> tuple[dict, str | None]:
    """A copy of `doc` with the tensors' values, the backward passes other than `keep_event`
    (the one drawn), the compiled regions' graphs and the figures dropped; and the sentence
    that says so (None when nothing went: `doc` itself is returned)."""
    copy = _copy(doc)
    dropped: list[str] = []
    if drop_values(copy):
        dropped.append("the tensors' values (their statistics stay)")
    events = copy.get("events") or []
    other = [e for e in events if e.get("kind") == "backward" and e.get("index") != keep_event]
    if other:
        gone = {id(e) for e in other}
        copy["events"] = [e for e in events if id(e) not in gone]
        skipped = copy.setdefault("events_skipped", {})
        skipped["backward"] = skipped.get("backward", 0) + len(other)
        dropped.append(f"{len(other)} backward pass(es) other than the one drawn")
    for key, what in (("compiled_regions", "the compiled regions' graphs"),
                      ("figures", "the figures")):
        if copy.get(key):
            copy.pop(key)
            dropped.append(what)
    if not dropped:
        return doc, None
    said = ("This output stores a smaller Trace than the run made: dropped "
            f"{'; '.join(dropped)}. `%%autograd_lab --whole` (or `show(..., whole=True)`) "
            "stores the whole.")
    copy.setdefault("diagnostics", []).append(diagnostic(BOUNDED_CODE, "info", said))
    return copy, said


def _copy(doc: dict) -> dict:
    """`doc` through JSON (NaN as null, as the notebook's JSON has it): orjson both ways where
    it wrote the text (json's reader took 0.15 s of an encoder step's 1.2 MB Trace; orjson
    reads back exactly what it wrote, having refused integers past 64 bits), else json's."""
    try:
        return orjson.loads(orjson.dumps(doc))
    except TypeError:  # what orjson will not write (orjson.JSONEncodeError is one)
        return json.loads(json_text.dumps(doc))

