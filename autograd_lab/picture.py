"""The picture a browser laid out, made safe to keep in a notebook. Where the kernel has no `dot`,
the live view lays the graph out with graphviz in WebAssembly and sends the SVG back
(widget.py), to be stored as the cell's picture (display.py). Anything can send that message,
so the text is hostile: bounded, parsed, and rebuilt from the few elements and attributes
graphviz draws with. What is not among them goes (scripts, foreign objects, links, event
handlers, styles); a value with anything past plain numbers, names and colours goes too (no
`url(...)`, no `javascript:`)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

__all__ = ["MAX_PICTURE_BYTES", "UnsafePicture", "safe_svg", "too_big"]

# in UTF-8. A notebook keeps this picture twice (as SVG and in the HTML's data URL); the
# kernel's own drawings of the biggest graphs drawn whole (a 7,000-node encoder) are a few MB.
# Jupyter's server takes a browser's message of at most 10 MiB (tornado's default), so the
# browser sends a bigger one's size only (widget.js keepPicture measures it as sent, in JSON)
MAX_PICTURE_BYTES = 8_000_000

SVG = "http://www.w3.org/2000/svg"
# graphviz's SVG: the elements it draws a graph with, and their attributes
_SHAPES = {"path", "polygon", "polyline", "ellipse", "circle", "rect", "line"}
_PAINT = {"fill", "stroke", "stroke-width", "stroke-dasharray", "stroke-linecap",
          "stroke-linejoin", "fill-opacity", "stroke-opacity", "opacity"}
_ALLOWED = {
    "svg": {"width", "height", "viewBox", "preserveAspectRatio"},
    "g": {"id", "class", "transform"},
    "title": set(),
    "text": {"x", "y", "text-anchor", "font-family", "font-size", "font-weight", "font-style",
             "text-decoration", "textLength", "lengthAdjust", *_PAINT},
    **{shape: {"d", "points", "cx", "cy", "rx", "ry", "r", "x", "y", "x1", "y1", "x2", "y2",
               "width", "height", "id", "class", *_PAINT} for shape in _SHAPES},
}
# elements inside elements: graphviz nests about 6 deep (svg, graph, cluster, node, link,
# text); 20,000 nested <g> (140 KB) made _rebuild's recursion raise RecursionError, which
# display.py's kept_static does not catch, so nothing said why the picture was not kept
MAX_DEPTH = 32
_UNWRAP = {"a"}  # graphviz's tooltip links (xlink:title): kept as a plain group
# numbers, names, colours, points and path data: no parentheses, quotes or colons
_PLAIN = re.compile(r"[\w\s#.,%+-]*")
_FONT = re.compile(r"[\w\s,.'\"-]*")
_TRANSFORM = re.compile(r"(\s*(scale|rotate|translate)\([-\d.eE,\s]*\))*\s*")
# the one DOCTYPE graphviz writes: an external id, no internal subset (where entities live)
_DOCTYPE = re.compile(r'<!DOCTYPE svg PUBLIC "[^"<>\[\]]*"\s+"[^"<>\[\]]*">')


class UnsafePicture(ValueError):
    """The browser's SVG cannot be kept; the message says why."""


def too_big(size: object) -> UnsafePicture:
    """What to say of a drawing of `size` bytes, past what an output keeps."""
    said = f"{size:,} bytes" if isinstance(size, int) and size >= 0 else "too big"
    return UnsafePicture(f"the browser's drawing is {said}, more than the "
                         f"{MAX_PICTURE_BYTES:,} a notebook output keeps; draw it by module "
                         "(--layout modules) or install graphviz where the kernel runs")


def safe_svg(text: object) -> str:
    """`text` as an SVG of graphviz's drawing elements only, or UnsafePicture."""
    if not isinstance(text, str) or not text:
        raise UnsafePicture("the browser sent no drawing")
    if len(text) > MAX_PICTURE_BYTES or len(text.encode("utf-8")) > MAX_PICTURE_BYTES:
        raise too_big(len(text.encode("utf-8")))
    body = _DOCTYPE.sub("", text, count=1)
    if re.search(r"<!(DOCTYPE|ENTITY|ELEMENT|ATTLIST)", body, re.IGNORECASE):
        raise UnsafePicture("the browser's drawing declares a document type of its own")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise UnsafePicture(f"the browser's drawing does not parse as XML: {exc}") from None
    if root.tag != f"{{{SVG}}}svg":
        raise UnsafePicture("the browser's drawing is not an SVG")
    clean = _rebuild(root)
    if not any(e.tag == "g" for e in clean.iter()):
        raise UnsafePicture("the browser's drawing has no graph in it")
    clean.set("xmlns", SVG)  # its elements are built with plain names, this one namespace's
    return ET.tostring(clean, encoding="unicode")


def _rebuild(element: ET.Element, depth: int = 1) -> ET.Element:
    """A new element of `element`'s kept attributes and children (the root is an <svg>, at
    `depth` 1)."""
    if depth > MAX_DEPTH:
        raise UnsafePicture(f"the browser's drawing nests elements more than {MAX_DEPTH} deep "
                            "(graphviz's nest about 6): it is not graphviz's drawing")
    tag = _local(element)
    kept = ET.Element("g" if tag in _UNWRAP else tag,
                      {} if tag in _UNWRAP else _attributes(tag, element.attrib))
    if tag in ("text", "title"):
        kept.text = "".join(element.itertext())  # only words: a child element's tags go
        return kept
    for child in element:
        if _local(child) in _ALLOWED or _local(child) in _UNWRAP:
            kept.append(_rebuild(child, depth + 1))
    return kept


def _local(element: ET.Element) -> str:
    """The element's name in the SVG namespace, or "" (any other namespace's, or none)."""
    return element.tag[len(SVG) + 2:] if element.tag.startswith(f"{{{SVG}}}") else ""


def _attributes(tag: str, attrib: dict[str, str]) -> dict[str, str]:
    kept = {}
    for name, value in attrib.items():
        if name not in _ALLOWED[tag] or len(value) > MAX_PICTURE_BYTES:
            continue  # xlink:href, on*, style and anything namespaced are not named above
        pattern = _TRANSFORM if name == "transform" else \
            _FONT if name == "font-family" else _PLAIN
        if pattern.fullmatch(value):
            kept[name] = value
    return kept
