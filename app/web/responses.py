"""Responses shared by the routers: drawings and Trace documents.

What cannot be drawn (no such event, a graph graphviz refuses) raises, and errors.py answers."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.responses import Response

from .errors import AppError

__all__ = ["MEDIA", "drawing", "document"]

MEDIA = {"svg": "image/svg+xml", "png": "image/png", "dot": "text/vnd.graphviz; charset=utf-8",
         "json": "application/json"}  # json: how the drawing was grouped, and its units
# an SVG opened on its own is a document of this origin: let it run nothing and fetch nothing
_SVG_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def drawing(fmt: str, draw: Callable[[], bytes]) -> Response:
    """A graph as svg, png or dot; 404 for another format."""
    if fmt not in MEDIA:
        raise AppError(404, f"no drawing as .{fmt}: use graph.svg, graph.png, graph.dot "
                            "or graph.json", "no_format")
    data = draw()
    headers = {"Content-Security-Policy": _SVG_POLICY} if fmt == "svg" else None
    return Response(data, media_type=MEDIA[fmt], headers=headers)


def document(doc: dict) -> Response:
    """A Trace as JSON, encoded here (in the worker thread of a sync route) rather than by
    FastAPI's encoder on the event loop, which took seconds for a large trace and held up
    every other request meanwhile."""
    return Response(json.dumps(doc, separators=(",", ":")).encode("utf-8"),
                    media_type="application/json")
