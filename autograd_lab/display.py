"""A Trace as a notebook output: the graph as SVG (drawn by app/render, the web page's own
renderer), a one-line summary, the Trace itself under its own JSON mimetype, and a link to the
run when it came from a running autograd-lab server."""

from __future__ import annotations

import html
from dataclasses import dataclass

from app.render import (
    FLAT,
    EventNotFound,
    RenderError,
    choose_grouping,
    event_graph,
    group_graph,
    render_graph,
)
from app.render.group import Grouping

__all__ = ["TRACE_MIMETYPE", "LAYOUTS", "TraceDisplay"]

TRACE_MIMETYPE = "application/vnd.autograd-lab.trace+json"
LAYOUTS = ("flat", "modules")


@dataclass
class TraceDisplay:
    """What IPython shows for a Trace (`_repr_mimebundle_`); `trace` holds the document."""

    trace: dict
    event: int | None = None
    layout: str | None = None  # None: flat when small, by module when big (as the page opens)
    link: str | None = None    # the run on the server it came from

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}: use one of {', '.join(LAYOUTS)}")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        svg, problem, drawn = self._drawing()
        lines = [self.summary(drawn)]
        if problem:
            lines.append(problem)
        bundle: dict = {"text/plain": "\n".join(lines), TRACE_MIMETYPE: self.trace}
        if svg is not None:
            bundle["image/svg+xml"] = svg
        if self.link or self.trace.get("error"):
            bundle["text/html"] = self._html(svg, lines)
        # the live view where a notebook runs widgets (JupyterLab, VS Code, Colab); the SVG and
        # HTML above stay in the bundle for what runs none (GitHub, nbviewer)
        try:
            live = self._widget(svg, lines[0])
            if live is not None:
                view = live._repr_mimebundle_()
                view = view[0] if isinstance(view, tuple) else view  # (data, metadata) or data
                bundle.update({k: v for k, v in view.items() if k != "text/plain"})
        except Exception as exc:  # noqa: BLE001 - the static output above is still whole
            bundle["text/plain"] += f"\n(the live view could not be made: {exc})"
        return bundle

    def _widget(self, svg: str | None, summary: str):
        """The anywidget of the drawn backward pass (widget.py), or None: no anywidget here
        (the `notebook` extra), or nothing but a make_dot view to show."""
        try:
            from .widget import TraceWidget
        except ImportError:
            return None
        backward = [e for e in self.trace.get("events") or () if e.get("kind") == "backward"]
        index = self.event if self.event is not None else \
            (backward[0]["index"] if backward else None)
        if index is None or svg is None:
            return None
        self.live = TraceWidget(self.trace, event=index, svg=svg, summary=summary,
                                link=self.link)
        return self.live

    def summary(self, drawn: str | None = None) -> str:
        doc = self.trace
        events = doc.get("events") or []
        backward = sum(1 for e in events if e.get("kind") == "backward")
        steps = sum(1 for e in events if e.get("kind") == "step")
        name = (doc.get("script") or {}).get("name") or "trace"
        if not events and doc.get("views"):  # show(tensor): the graph make_dot walks
            name, counted = doc["views"][0].get("label") or name, []
        else:
            counted = [f"{len(events)} event(s) ({backward} backward, {steps} optimizer "
                       "step(s))"]
        parts = [*counted, *([drawn] if drawn else []),
                 f"{len(doc.get('params') or {})} parameter(s)"]
        line = f"autograd-lab: {name}: " + ", ".join(parts)
        error = doc.get("error")
        if error:
            where = f" at line {error['line']}" if error.get("line") else ""
            line += f"\nThe code failed{where}: {error.get('type')}: {error.get('message')}"
        elif not backward and not doc.get("views"):
            line += ("\nNo backward pass was recorded: call .backward() in the cell, or draw a "
                     "tensor's graph with autograd_lab.show(tensor).")
        return line

    def _graph(self) -> tuple[dict, str]:
        """The graph to draw and what it is: the chosen backward event, else the first view."""
        doc = self.trace
        has_backward = any(e.get("kind") == "backward" for e in doc.get("events") or [])
        if self.event is not None or has_backward or not doc.get("views"):
            graph = event_graph(doc, self.event)
            return graph, "backward pass"
        return event_graph(doc, view=0), "graph"

    def _drawing(self) -> tuple[str | None, str | None, str | None]:
        """(SVG, why there is none, what was drawn)."""
        try:
            graph, what = self._graph()
        except EventNotFound as exc:
            return None, (None if self.event is None else f"No drawing: {exc}."), None
        nodes = sum(1 for n in graph["nodes"] if n.get("kind") != "output")
        grouping = self._grouping(graph)
        drawn = graph if grouping.flat else group_graph(graph, grouping)
        said = f"{what} of {nodes} node(s)" + ("" if grouping.flat else ", drawn by module")
        try:
            svg = render_graph(drawn).decode("utf-8")
        except RenderError as exc:
            return None, f"No drawing: {exc}", said
        return svg, None, said

    def _grouping(self, graph: dict) -> Grouping:
        if self.layout == "flat":
            return FLAT
        grouping = choose_grouping(graph)
        if self.layout == "modules" and grouping.flat:
            return Grouping(depth=1)
        return grouping

    def _html(self, svg: str | None, lines: list[str]) -> str:
        # every string here may be the person's own (a node label, a script name, an error)
        # the SVG is graphviz's, from DOT whose every string app/render escaped; inline in HTML
        # it starts at <svg> (no XML declaration or DOCTYPE)
        inline = svg[svg.find("<svg"):] if svg and "<svg" in svg else ""
        parts = [f'<div class="autograd-lab">{inline}<pre>{html.escape(chr(10).join(lines))}'
                 '</pre>']
        if self.link:
            parts.append(f'<p><a href="{html.escape(self.link, quote=True)}" target="_blank" '
                         'rel="noopener noreferrer">Open this run in autograd-lab</a></p>')
        parts.append("</div>")
        return "".join(parts)
