"""Trace graph -> DOT -> SVG/PNG. Reads Trace documents only; never imports torch."""

from .dot import EventNotFound, event_graph, to_dot
from .draw import RenderError, render, render_graph
from .group import FLAT, Grouping, choose_grouping, group_graph, layout_document
from .legend import KINDS

__all__ = ["FLAT", "KINDS", "EventNotFound", "Grouping", "RenderError", "choose_grouping",
           "event_graph", "group_graph", "layout_document", "render", "render_graph", "to_dot"]
