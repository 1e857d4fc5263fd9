"""Responses shared by the routers: drawings and Trace documents, and a stored run's Trace
streamed as the store keeps it (gzip JSON).

What cannot be drawn (no such event, a graph graphviz refuses) raises, and error_handler.py
answers."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator

from fastapi.responses import Response, StreamingResponse

from app.web.errors import AppError

__all__ = ["MEDIA", "accepts_gzip", "drawing", "document", "gzip_json", "inflated",
           "matches_etag"]

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


def gzip_json(chunks: Iterable[bytes], size: int, compressed: bool,
              headers: dict[str, str]) -> StreamingResponse:
    """JSON kept gzipped, `size` bytes of it in `chunks`: sent as it is to a client that takes
    gzip (`compressed`), else inflated a piece at a time; never whole in memory."""
    if compressed:
        return StreamingResponse(chunks, media_type="application/json", headers={
            **headers, "Content-Encoding": "gzip", "Content-Length": str(size)})
    return StreamingResponse(inflated(chunks), media_type="application/json", headers=headers)


def inflated(chunks: Iterable[bytes], piece: int = 256 * 1024) -> Iterator[bytes]:
    """The gzip stream `chunks`, decompressed, at most `piece` bytes at a time (a highly
    compressed chunk must not become one huge string)."""
    stream = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    for chunk in chunks:
        data = stream.decompress(chunk, piece)
        while data or stream.unconsumed_tail:
            if data:
                yield data
            data = stream.decompress(stream.unconsumed_tail, piece)
    if rest := stream.flush():
        yield rest


_QVALUE = re.compile(r"0(\.\d{0,3})?|1(\.0{0,3})?")


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Does this Accept-Encoding admit gzip (RFC 9110 12.5.3: by name or by "*", with a weight
    above 0)? No header: plain JSON, for a program that never said it can inflate."""
    weights: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        if coding:
            weights[coding.lower()] = _weight(params)
    for name in ("gzip", "x-gzip", "*"):
        if name in weights:
            return weights[name] > 0
    return False


def _weight(params: list[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            # a weight that is not one RFC 9110 allows refuses the coding: plain JSON is safe
            return float(value) if _QVALUE.fullmatch(value) else 0.0
    return 1.0


def matches_etag(if_none_match: str | None, etag: str) -> bool:
    """Does If-None-Match name `etag` (or say "*")? Weak comparison, as RFC 9110 13.1.2 asks."""
    if not if_none_match:
        return False
    wanted = _opaque(etag)
    return any(tag == "*" or _opaque(tag) == wanted
               for tag in (t.strip() for t in if_none_match.split(",")))


def _opaque(tag: str) -> str:
    return tag[2:] if tag.startswith("W/") else tag
