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

__all__ = ["FORMAT", "SCHEMA_PATH", "new_document", "error_record", "load_schema"]


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
