"""Trace graph -> DOT -> SVG/PNG. Reads Trace documents only; never imports torch."""

from .dot import EventNotFound, event_graph, to_dot
from .draw import RenderError, render, render_graph
from .legend import KINDS

__all__ = ["KINDS", "EventNotFound", "RenderError", "event_graph", "render", "render_graph",
           "to_dot"]
