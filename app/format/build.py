"""Builders of the Trace document's parts, used by the tracer, the runner and the web layer
alike: a document has one empty shape, an error one form, a finding one form."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

from .types import FORMAT, Diagnostic, DiagnosticLevel, ErrorRecord, Number, Trace

__all__ = ["MAX_TEXT", "clip", "new_document", "error_record", "diagnostic", "json_number"]

MAX_TEXT = 20_000  # a message's length in the schema ($defs/text)


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out: an exception's
    message is the script's to choose, and may be any size."""
    if len(text) <= limit:
        return text
    note = f" [... {len(text) - limit + 40} more characters]"
    return text[:limit - 40] + note


def new_document(name: str, source: str, device: str, torch_version: str | None) -> Trace:
    """A document with every required key, before anything ran."""
    return {
        "format": FORMAT,
        "script": {
            "name": name,
            "source": source,
            "sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "args": [],
        },
        "torch": None if torch_version is None else str(torch_version),  # not TorchVersion
        "device": device,
        "events": [],
        "events_skipped": {"backward": 0, "step": 0},
        "params": {},
        "diagnostics": [],
        "stdout": "",
        "stderr": "",
        "error": None,
    }


def error_record(kind: str, message: str, line: int | None = None, **extra: Any) -> ErrorRecord:
    """The `error` field: what went wrong, in words a person can act on, and the script's line."""
    return {"type": kind, "message": clip(message), "line": line,  # type: ignore[typeddict-item]
            **extra}


def diagnostic(code: str, level: DiagnosticLevel, message: str, params: Iterable[str] = (),
               nodes: Iterable[str] = (), event: int | None = None) -> Diagnostic:
    """One finding a teacher would point at, naming the parameters and nodes it concerns."""
    return {"code": code, "level": level, "message": clip(message), "params": list(params),
            "nodes": list(nodes), "event": event}


def json_number(x: float) -> Number:
    """A float as the Trace writes it: JSON has no NaN or infinity, so those become the strings
    "NaN", "Infinity" and "-Infinity" (the names JavaScript gives them)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x
