"""The Trace document: its format name, its empty shape and error records.

Torch-free on purpose: the runner and the web process build and read documents without
importing torch.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "autograd-lab/trace@1"
SCHEMA_PATH = Path(__file__).with_name("trace.schema.json")

__all__ = ["FORMAT", "SCHEMA_PATH", "new_document", "error_record", "load_schema",
           "malformed"]

_KINDS = {"op", "custom", "param", "leaf", "output"}


def new_document(name: str, source: str, device: str, torch_version: str | None) -> dict[str, Any]:
    """A document with every required key, before anything ran."""
    return {
        "format": FORMAT,
        "script": {
            "name": name,
            "source": source,
            "sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "args": [],
        },
        "torch": torch_version,
        "device": device,
        "events": [],
        "events_skipped": {"backward": 0, "step": 0},
        "params": {},
        "diagnostics": [],
        "stdout": "",
        "stderr": "",
        "error": None,
    }


def error_record(kind: str, message: str, line: int | None = None, **extra: Any) -> dict[str, Any]:
    """The `error` field: what went wrong, in words a person can act on, and the script's line."""
    return {"type": kind, "message": message, "line": line, **extra}


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def malformed(doc: object) -> str | None:
    """Why `doc` is not a Trace document the server can use, or None.

    The worker's report comes from the process that ran the script, so a hostile script can
    write it: the web layer trusts nothing it does not check here (shape, kinds, types of the
    fields it reads). The JSON Schema says the same at length; this is the quick check run on
    every document.
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return "not a Trace document"
    script = doc.get("script")
    if not isinstance(script, dict) or not isinstance(script.get("name"), str) \
            or not isinstance(script.get("source"), str):
        return "no script"
    error = doc.get("error")
    if error is not None and not (isinstance(error, dict) and isinstance(error.get("type"), str)
                                  and isinstance(error.get("message"), str)):
        return "a malformed error"
    for key in ("params", "events_skipped"):
        if not isinstance(doc.get(key, {}), dict):
            return f"a malformed {key}"
    if not isinstance(doc.get("events"), list) or not isinstance(doc.get("diagnostics"), list):
        return "no events or diagnostics"
    for event in doc["events"]:
        if not isinstance(event, dict) or event.get("kind") not in ("backward", "step") \
                or not isinstance(event.get("index"), int):
            return "a malformed event"
        graph = event.get("graph")
        if event["kind"] == "backward":
            if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) \
                    or not isinstance(graph.get("edges"), list):
                return "a backward event without a graph"
            for node in graph["nodes"]:
                if not isinstance(node, dict) or node.get("kind") not in _KINDS \
                        or not all(isinstance(node.get(k), str) for k in ("id", "name")) \
                        or not isinstance(node.get("label", ""), str):
                    return "a malformed node"
            for edge in graph["edges"]:
                if not isinstance(edge, dict) or not isinstance(edge.get("source"), str) \
                        or not isinstance(edge.get("target"), str) \
                        or not isinstance(edge.get("slot"), int):
                    return "a malformed edge"
    return None
