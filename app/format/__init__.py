"""The Trace document: its types, builders, JSON Schema and validator.

Torch-free and web-free: the tracer writes Traces with these builders, the runner completes and
checks them, the web layer and the renderer read them. Nothing here imports another part of
the app.
"""

from .build import MAX_TEXT, clip, diagnostic, error_record, json_number, new_document
from .schema import SCHEMA_PATH, InvalidTrace, load_schema, validate
from .types import FORMAT, Diagnostic, ErrorRecord, Event, Figure, Graph, Node, Trace

__all__ = [
    "FORMAT", "MAX_TEXT", "SCHEMA_PATH", "Diagnostic", "ErrorRecord", "Event", "Figure", "Graph",
    "InvalidTrace", "Node", "Trace", "clip", "diagnostic", "error_record", "json_number",
    "load_schema", "new_document", "validate",
]
