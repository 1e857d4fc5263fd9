"""Run graphviz's `dot` on DOT source, and check that an SVG carries nothing active."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

from .dot import to_dot

__all__ = ["RenderError", "render", "render_graph", "MAX_DRAWN_NODES", "MAX_DRAWN_EDGES"]

MAX_DRAWN_NODES = 3000
MAX_DRAWN_EDGES = 12000  # a forged graph may list many edges between few nodes
FORMATS = ("svg", "png", "dot")
# The page inserts the SVG into itself: it may not link anywhere or run anything. graphviz
# writes <a xlink:title=...> for tooltips, which is harmless; an href never comes from our DOT.
_ACTIVE_ELEMENTS = {"script", "foreignObject", "iframe", "object", "embed", "image", "use",
                    "animate", "set", "handler", "listener"}


class RenderError(RuntimeError):
    """The graph cannot be drawn; the message says why and what to do."""


def render(dot_source: str, fmt: str = "svg", timeout: float = 60.0) -> bytes:
    if fmt not in FORMATS:
        raise RenderError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "dot":
        return dot_source.encode("utf-8")
    exe = shutil.which("dot")
    if exe is None:
        raise RenderError("graphviz's `dot` program is not installed; install it with "
                          "`apt-get install graphviz` (or run `make serve`, which does)")
    try:
        done = subprocess.run([exe, f"-T{fmt}"], input=dot_source.encode("utf-8"),
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RenderError(f"graphviz took longer than {timeout:g} s to lay out this graph") \
            from exc
    if done.returncode != 0:
        raise RenderError("graphviz failed: " + done.stderr.decode("utf-8", "replace").strip())
    if fmt == "svg":
        check_inert(done.stdout)
    return done.stdout


def check_inert(svg: bytes) -> None:
    """Raise RenderError if the SVG has a script, a link or an event handler anywhere."""
    try:
        root = ET.fromstring(svg)
    except ET.ParseError as exc:
        raise RenderError(f"graphviz wrote an SVG that does not parse: {exc}") from exc
    for element in root.iter():
        tag = element.tag.rsplit("}", 1)[-1]
        names = [name.rsplit("}", 1)[-1].lower() for name in element.attrib]
        if tag in _ACTIVE_ELEMENTS or any(n == "href" or n.startswith("on") for n in names):
            raise RenderError("this drawing would carry a link or a script, so it is not "
                              "served; names in the trace may have been forged")


def render_graph(graph: dict, fmt: str = "svg", title: str | None = None) -> bytes:
    """Draw a Trace graph; refuses graphs too large for a person to read (or graphviz to lay
    out in reasonable time)."""
    n = len(graph["nodes"])
    if n > MAX_DRAWN_NODES:
        raise RenderError(f"this graph has {n} nodes; autograd-lab draws at most "
                          f"{MAX_DRAWN_NODES}. Trace a smaller model or fewer steps, or export "
                          "the Trace JSON to inspect it.")
    edges = len(graph["edges"]) + len(graph.get("cuts", ()))
    if edges > MAX_DRAWN_EDGES:
        raise RenderError(f"this graph has {edges} edges; autograd-lab draws at most "
                          f"{MAX_DRAWN_EDGES}. Export the Trace JSON to inspect it.")
    return render(to_dot(graph, title), fmt)
