"""Trace graph -> DOT -> SVG/PNG. Reads Trace documents only; never imports torch."""

from .dot import FONT_SCALES, EventNotFound, event_graph, font_scale, to_dot
from .draw import LayoutFailed, RenderError, drawable_dot, has_dot, render, render_graph
from .group import FLAT, Grouping, choose_grouping, group_graph, layout_document
from .legend import KINDS

__all__ = ["FLAT", "FONT_SCALES", "KINDS", "EventNotFound", "Grouping", "LayoutFailed",
           "RenderError",
           "choose_grouping", "drawable_dot", "event_graph", "font_scale", "group_graph",
           "has_dot", "layout_document", "render", "render_graph", "to_dot"]
