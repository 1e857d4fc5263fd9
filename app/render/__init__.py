"""Trace graph -> DOT -> SVG/PNG. Reads Trace documents only; never imports torch."""

from .dot import event_graph, to_dot
from .draw import RenderError, render, render_graph
from .legend import KINDS

__all__ = ["KINDS", "RenderError", "event_graph", "render", "render_graph", "to_dot"]
