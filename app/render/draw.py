"""Run graphviz's `dot` on DOT source."""

from __future__ import annotations

import shutil
import subprocess

from .dot import to_dot

__all__ = ["RenderError", "render", "render_graph", "MAX_DRAWN_NODES"]

MAX_DRAWN_NODES = 3000
FORMATS = ("svg", "png", "dot")


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
    return done.stdout


def render_graph(graph: dict, fmt: str = "svg", title: str | None = None) -> bytes:
    """Draw a Trace graph; refuses graphs too large for a person to read (or graphviz to lay
    out in reasonable time)."""
    n = len(graph["nodes"])
    if n > MAX_DRAWN_NODES:
        raise RenderError(f"this graph has {n} nodes; autograd-lab draws at most "
                          f"{MAX_DRAWN_NODES}. Trace a smaller model or fewer steps, or export "
                          "the Trace JSON to inspect it.")
    return render(to_dot(graph, title), fmt)
