"""Run graphviz's `dot` on DOT source, and check that an SVG carries nothing active."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET

from .dot import to_dot

__all__ = ["RenderError", "LayoutFailed", "render", "render_graph", "drawable_dot", "has_dot",
           "MAX_DRAWN_NODES", "MAX_DRAWN_EDGES"]

# the flat view of a 96-layer transformer (7,000 nodes) is drawn; far beyond that graphviz takes
# minutes, and a grouped view says more
MAX_DRAWN_NODES = 20_000
MAX_DRAWN_EDGES = 60_000  # a forged graph may list many edges between few nodes
# above this many nodes (a graph that would open by module, drawn flat on request) edges carry no
# shape label: graphviz lays each label out as a node of its own, which made a 5,000-node graph
# take 65 s instead of 8; and x positions are settled with few network-simplex iterations, which
# took a 7,000-node graph from 22 s to 7 (bench/big_models.py)
COMPACT_ABOVE = 300
# a graph drawn by module whose boxes are tangled past this is refused at once: a real model's
# boxes have one or two edges each, and a forged report's 92 boxes with 8,186 edges between
# them were past graphviz's minute (issue 38)
MAX_GROUPED_EDGES = 1_500
TANGLED_PER_BOX = 4
FORMATS = ("svg", "png", "dot")
# The page inserts the SVG into itself: it may not link anywhere or run anything. graphviz
# writes <a xlink:title=...> for tooltips, which is harmless; an href never comes from our DOT.
_ACTIVE_ELEMENTS = {"script", "foreignObject", "iframe", "object", "embed", "image", "use",
                    "animate", "set", "handler", "listener"}


class RenderError(RuntimeError):
    """The graph cannot be drawn; the message says why and what to do."""


class LayoutFailed(RenderError):
    """graphviz itself gave up on the graph: past its time, or failed. Any format and type size
    of the same graph would fail the same way (the drawings remember it per graph and grouping)."""


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
        done = subprocess.run(_bounded([exe, f"-T{fmt}"], timeout),
                              input=dot_source.encode("utf-8"),
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LayoutFailed(f"graphviz took longer than {timeout:g} s to lay out this graph; "
                           "draw it by module (fewer modules), or export the Trace JSON") \
            from exc
    if done.returncode != 0:
        raise LayoutFailed("graphviz failed: " + done.stderr.decode("utf-8", "replace").strip())
    if fmt == "svg":
        check_inert(done.stdout)
    return done.stdout


def _bounded(command: list[str], timeout: float) -> list[str]:
    """`command` bounded on its own, not only by the server that waits for it: a CPU-time limit
    a little past `timeout` (util-linux's prlimit; no core file), and death with the thread
    that started it (setpriv's parent-death signal), so a server stopped mid-render leaves no
    `dot` behind (one once ran on at a full core for 16 minutes after its server). Where
    util-linux lacks either, the command runs without that bound."""
    prlimit, setpriv = shutil.which("prlimit"), shutil.which("setpriv")
    if prlimit:
        cpu = int(timeout) + 5
        command = [prlimit, f"--cpu={cpu}:{cpu + 1}", "--core=0", "--", *command]
    if setpriv:
        command = [setpriv, "--pdeathsig", "KILL", "--", *command]
    return command


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


def has_dot() -> bool:
    """Whether graphviz's `dot` is on this machine (a notebook kernel's may have none)."""
    return shutil.which("dot") is not None


def drawable_dot(graph: dict, title: str | None = None, font: float = 1.0) -> str:
    """The DOT that `render_graph` gives graphviz, after the same size checks: also what a
    notebook's widget lays out in the browser where the kernel has no `dot`."""
    n = len(graph["nodes"])
    if n > MAX_DRAWN_NODES:
        raise RenderError(f"this graph has {n:,} nodes; autograd-lab lays out at most "
                          f"{MAX_DRAWN_NODES:,} at once. Draw it by module instead (the page "
                          "does by default; the API takes ?depth=N, the CLI --depth N).")
    edges = len(graph["edges"]) + len(graph.get("cuts", ()))
    if edges > MAX_DRAWN_EDGES:
        raise RenderError(f"this graph has {edges:,} edges; autograd-lab lays out at most "
                          f"{MAX_DRAWN_EDGES:,} at once. Draw it by module instead, or export "
                          "the Trace JSON to inspect it.")
    if "grouping" in graph and edges > max(MAX_GROUPED_EDGES, TANGLED_PER_BOX * n):
        raise RenderError(f"drawn by module, this graph has {n:,} boxes with {edges:,} edges "
                          "between them, more than graphviz lays out in time: open one module "
                          "(?open=PATH), draw it flat (?layout=flat), or export the Trace JSON")
    return to_dot(graph, title, compact=n > COMPACT_ABOVE, font=font)


def render_graph(graph: dict, fmt: str = "svg", title: str | None = None,
                 font: float = 1.0, timeout: float = 300.0) -> bytes:
    """Draw a Trace graph (flat, or grouped by app/render/group.py), its label type scaled by
    `font` (dot.py). A graph too big to lay out in reasonable time is refused with what to
    draw instead: the same graph by module. graphviz gets `timeout` seconds (at most 60 for a
    graph of up to 300 nodes, which a real model's never needs)."""
    source = drawable_dot(graph, title, font)
    small = len(graph["nodes"]) <= COMPACT_ABOVE
    return render(source, fmt, timeout=min(60.0, timeout) if small else timeout)
