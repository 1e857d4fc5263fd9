"""A Trace as a notebook output: the graph as SVG (drawn by app/render, the web page's own
renderer), a one-line summary, the Trace itself under its own JSON mimetype, and a link to the
run when it came from a running autograd-lab server.

The kernel's graphviz draws when the kernel's machine has `dot`: the same drawing as the run
page's, and a static SVG in the output for GitHub and nbviewer. Without it the live view lays the
same DOT out in the browser (graphviz compiled to WebAssembly, static/js/browser_layout.js) and
sends its SVG back, which the static output is shown again with (`draw="browser"` chooses that
even where `dot` is): either way a saved notebook holds a picture."""

from __future__ import annotations

import base64
import functools
import html
import uuid
from dataclasses import dataclass, field

from app.format.explained import say_lines
from app.format.notebook import where
from app.render import (
    FLAT,
    EventNotFound,
    RenderError,
    choose_grouping,
    drawable_dot,
    event_graph,
    group_graph,
    has_dot,
    render_graph,
)
from app.render.group import Grouping

from .failure import cells_of
from .picture import UnsafePicture, safe_svg
from .stored import bounded_trace

__all__ = ["TRACE_MIMETYPE", "LAYOUTS", "DRAWERS", "TraceDisplay"]

TRACE_MIMETYPE = "application/vnd.autograd-lab.trace+json"
LAYOUTS = ("flat", "modules")
DRAWERS = ("kernel", "browser")  # who lays the graph out: the kernel's `dot`, or the browser's
NO_DOT = ("graphviz's `dot` is not installed where this kernel runs, so the kernel draws no "
          "static picture for GitHub or nbviewer (`apt-get install graphviz` gives one); the "
          "live view lays the graph out in the browser and keeps its picture here.")
# ...which it did: the static output shown again (`_keep_picture`) says so instead
BROWSER_DRAWN = ("This picture was laid out in the browser (graphviz compiled to WebAssembly) "
                 "by the live view, which kept it here.")
NO_DOT_DRAWN = f"graphviz's `dot` is not installed where this kernel runs. {BROWSER_DRAWN}"

# the live view's output, as a front end with no widgets says it (an untrusted notebook in
# JupyterLab, GitHub, nbviewer): nothing. The static output above it holds the picture and the
# note to run the cell (RERUN_NOTE), which a second note here only said again
LIVE_ONLY = ""

# the static output's first line, seen only when the live view is not (widget.js hides the
# static output while the view runs): a notebook reopened, on GitHub or nbviewer
RERUN_NOTE = "Run this cell to get the interactive view back."
PICTURE_NOTE = "A saved picture: run this cell to get the interactive view back."
# JupyterLab keeps a widget's output in a reopened notebook and, with the widget's model gone
# with its kernel (ipywidgets 8 has no fallback: jupyterlab-manager's WidgetRenderer), writes
# "Error displaying widget: model not found" there, on the renderer's own node, which it marks
# .jupyter-widgets (a view that did render is a child of the node, which is not marked). This
# rule, in the static output's HTML, hides that row when it is the one right after a static
# output: the note above says what to do instead. JupyterLab applies an output's <style> only
# in a trusted notebook, which is also the only one where it renders a widget's output (an
# untrusted one shows its text/plain, LIVE_ONLY).
NO_MODEL_RULE = (".jp-OutputArea-child:has([data-autograd-lab-static]) + "
                 ".jp-OutputArea-child:has(> .jp-OutputArea-output.jupyter-widgets) "
                 "{ display: none; }")

NO_WIDGET = ("No drawing: graphviz's `dot` is not installed where this kernel runs, and the live "
             "view that lays a graph out in the browser needs anywidget: `pip install "
             "'autograd-lab[notebook]'` (or `apt-get install graphviz`).")


def _widgets_here() -> bool:
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Drawing:
    """What the kernel made of the graph: an SVG, or the DOT the browser lays out."""

    svg: str | None = None
    dot: str | None = None
    problem: str | None = None  # why there is no drawing at all, or no static one
    said: str | None = None     # what was drawn: "backward pass of 12 node(s)"
    view: int | None = None     # the Trace's view drawn (show(tensor)), not a backward pass
    # the drawn modules and folds (app/render/group.py's unit nodes: id, kind, name, path,
    # counts), which the live view opens on a click, and the paths opened to draw it
    units: list = field(default_factory=list)
    opened: list = field(default_factory=list)


@dataclass
class TraceDisplay:
    """What IPython shows for a Trace (`_repr_mimebundle_`); `trace` holds the document."""

    trace: dict
    event: int | None = None
    layout: str | None = None  # None: flat when small, by module when big (as the page opens)
    link: str | None = None    # the run on the server it came from
    draw: str | None = None    # None: the kernel's `dot` where there is one, else the browser
    failure_shown: bool = False  # the cell's failure is explained in an output above this one
    whole: bool = False  # the output keeps the whole Trace, not the bounded one (stored.py)
    static_id: str = field(default="", init=False, repr=False)  # the static output's, per show

    def __post_init__(self) -> None:
        if self.layout is not None and self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}: use one of {', '.join(LAYOUTS)}")
        if self.draw is not None and self.draw not in DRAWERS:
            raise ValueError(f"unknown draw {self.draw!r}: use one of {', '.join(DRAWERS)}")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """One bundle: the static output and, where widgets run, the live view's. IPython
        itself shows the two as two outputs (`_ipython_display_`)."""
        static, live = self._outputs()
        if live:
            static.update({k: v for k, v in live.items() if k != "text/plain"})
        return static

    def _ipython_display_(self) -> None:
        """Two outputs: the static one (the picture as HTML and SVG, the summary, the bounded
        Trace), then the live view. JupyterLab renders a widget's view whenever its output has
        one, and a notebook reopened without the widget's model says "Error displaying widget:
        model not found" there instead of any picture the same output holds: kept apart, the
        picture stays. While the live view runs it hides its static twin (widget.js)."""
        from IPython.display import display

        static, live = self._outputs(updatable=True)
        # by its id the static output is shown again with the browser's picture (_keep_picture)
        display(static, raw=True, display_id=self.static_id)
        if live:
            display(live, raw=True)

    def _outputs(self, updatable: bool = False) -> tuple[dict, dict | None]:
        """The static output and the live view's (None where there is none). `updatable`: the
        static output is shown with its id, so the browser's picture can take its place."""
        drawing = self._drawing()
        if drawing.dot is not None and not _widgets_here():
            drawing.problem = NO_WIDGET
        lines = [self.summary(drawing.said)]
        if drawing.problem:
            lines.append(drawing.problem)
        stored, dropped = (self.trace, None) if self.whole else \
            bounded_trace(self.trace, self._event())
        if dropped:
            lines.append(dropped)
        self.static_id = uuid.uuid4().hex
        self._kept = (self.static_id, lines[0], [dropped] if dropped else [], stored)
        # the browser answers later, maybe after this Trace is shown again: its picture goes
        # to this output (its id and what it holds), bound now, not to the latest one
        keep = functools.partial(self._keep_picture, self._kept) if updatable else None
        live, failed = None, None
        try:
            widget = self._widget(drawing, lines[0], keep=keep)
            if widget is not None:
                view = widget._repr_mimebundle_()
                view = view[0] if isinstance(view, tuple) else view  # (data, metadata) or data
                live = {**view, "text/plain": LIVE_ONLY}
        except Exception as exc:  # noqa: BLE001 - the static output above is still whole
            failed = f"(the live view could not be made: {exc})"
        return self._static(drawing.svg, lines, stored, live is not None, failed), live

    def _static(self, svg: str | None, lines: list[str], stored: dict, live: bool,
                failed: str | None = None, static_id: str | None = None) -> dict:
        static: dict = {"text/plain": "\n".join([*lines, *([failed] if failed else [])]),
                        TRACE_MIMETYPE: stored}
        if svg is not None:
            static["image/svg+xml"] = svg
        static["text/html"] = self._html(svg, lines, live=live, static_id=static_id)
        return static

    def kept_static(self, sent: object, kept: tuple | None = None) -> dict:
        """The static output again, with the picture the browser laid out and sent (`sent`,
        widget.py) made safe (picture.py) where the note that there is none was; or, refused,
        that note and why. `kept`: that output's id and what it held (_outputs); None, the
        latest output's."""
        static_id, summary, dropped, stored = kept or self._kept
        try:
            if isinstance(sent, UnsafePicture):
                raise sent
            svg: str | None = safe_svg(sent)
            said = [BROWSER_DRAWN if self.draw == "browser" else NO_DOT_DRAWN]
        except UnsafePicture as exc:
            svg = None
            said = [*([] if self.draw == "browser" else [NO_DOT]),
                    f"The picture the browser laid out was not kept: {exc}."]
        return self._static(svg, [summary, *said, *dropped], stored, live=True,
                            static_id=static_id)

    def _keep_picture(self, kept: tuple, sent: object) -> None:
        """Show the static output `kept` names (its id first) again, with the browser's
        picture: JupyterLab puts it in place of the first, and a notebook saved from then on
        keeps it."""
        from IPython.display import update_display

        update_display(self.kept_static(sent, kept), raw=True, display_id=kept[0])

    def redraw(self, event: int | None, opened: list[str]) -> Drawing:
        """The live view's drawing of backward pass `event` with the module and fold paths
        `opened` open (the page's "click a module to open it", its event buttons)."""
        if event is not None and not any(e.get("index") == event and e.get("kind") == "backward"
                                         for e in self.trace.get("events") or ()):
            return Drawing(problem=f"No drawing: this run has no backward pass {event}.")
        return self._drawing(event, frozenset(opened))

    def _widget(self, drawing: Drawing, summary: str, keep=None):
        """The anywidget of the drawn backward pass or view (widget.py), or None: no anywidget
        here (the `notebook` extra), or nothing drawn. `keep` takes the picture the browser
        lays out, where it does."""
        if not _widgets_here():
            return None
        from .widget import TraceWidget
        index = self._event()
        if drawing.view is not None:
            index = None  # the widget shows the view: a graph with no pass to replay
        if (index is None and drawing.view is None) or (drawing.svg is None and
                                                        drawing.dot is None):
            return None
        self.live = TraceWidget(self.trace, event=index, view=drawing.view, svg=drawing.svg,
                                dot=drawing.dot, summary=summary, link=self.link,
                                static_id=self.static_id, units=drawing.units,
                                opened=drawing.opened, keep=keep,
                                redraw=self.redraw if drawing.view is None else None)
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
            cells = cells_of(doc)
            at = f" at {where(cells, error['line'])}" if error.get("line") else ""
            line += (f"\nThe code failed{at} with {error.get('type')}: said above."
                     if self.failure_shown else
                     f"\nThe code failed{at}: {error.get('type')}: "
                     f"{say_lines(str(error.get('message')), cells)}")
        elif not backward and not doc.get("views"):
            line += ("\nNo backward pass was recorded: call .backward() in the cell, or draw a "
                     "tensor's graph with autograd_lab.show(tensor).")
        return line

    def _event(self) -> int | None:
        """The backward event shown: the one asked for; else the pass the failure's explanation
        names (a second backward through a freed graph), else the one that failed, else the
        first."""
        if self.event is not None:
            return self.event
        backward = [e for e in self.trace.get("events") or () if e.get("kind") == "backward"]
        indexes = {e.get("index") for e in backward}
        explained = ((self.trace.get("error") or {}).get("explanation") or {}).get("event")
        if explained in indexes:
            return explained
        failed = [e["index"] for e in backward if e.get("error")]
        return failed[-1] if failed else (backward[0]["index"] if backward else None)

    def _graph(self, event: int | None = None) -> tuple[dict, str, int | None]:
        """The graph to draw, what it is, and which view it is: backward pass `event`, else
        the chosen backward event (view None), else the first view."""
        doc = self.trace
        has_backward = any(e.get("kind") == "backward" for e in doc.get("events") or [])
        if event is not None:
            return event_graph(doc, event), "backward pass", None
        if self.event is not None or has_backward or not doc.get("views"):
            graph = event_graph(doc, self._event())
            return graph, "backward pass", None
        return event_graph(doc, view=0), "graph", 0

    def _drawing(self, event: int | None = None,
                 opened: frozenset[str] = frozenset()) -> Drawing:
        try:
            graph, what, view = self._graph(event)
        except EventNotFound as exc:
            return Drawing(problem=None if self.event is None else f"No drawing: {exc}.")
        nodes = sum(1 for n in graph["nodes"] if n.get("kind") != "output")
        grouping = self._grouping(graph, opened)
        drawn = graph if grouping.flat else group_graph(graph, grouping)
        said = f"{what} of {nodes} node(s)" + ("" if grouping.flat else ", drawn by module")
        units = [n for n in drawn["nodes"] if n.get("kind") in ("module", "fold")]
        kept = {"said": said, "view": view, "units": units, "opened": sorted(grouping.opened)}
        in_browser = self.draw == "browser" or (self.draw is None and not has_dot())
        try:
            if in_browser:
                return Drawing(dot=drawable_dot(drawn), **kept,
                               problem=None if self.draw == "browser" else NO_DOT)
            return Drawing(svg=render_graph(drawn).decode("utf-8"), **kept)
        except RenderError as exc:
            return Drawing(problem=f"No drawing: {exc}", said=said)

    def _grouping(self, graph: dict, opened: frozenset[str] = frozenset()) -> Grouping:
        """As the page chooses (app/render/group.py): flat when small, by module when big or
        asked, with `opened` paths open (those the graph has) at the depth it opened with, as
        the page keeps it (trace_page.js openUnit)."""
        if self.layout == "flat":
            return FLAT
        grouping = choose_grouping(graph)
        if self.layout == "modules" and grouping.flat:
            return choose_grouping(graph, depth=1, opened=opened)
        if grouping.flat or not opened:
            return grouping
        return choose_grouping(graph, depth=grouping.depth or 0, opened=opened)

    def _html(self, svg: str | None, lines: list[str], live: bool = False,
              static_id: str | None = None) -> str:
        # every string here may be the person's own (a node label, a script name, an error)
        # the picture is an <img> of the SVG, not the SVG inline: a notebook opened untrusted
        # (anyone else's) has its HTML sanitized by JupyterLab, which drops an inline <svg>'s
        # tags and keeps their text (the labels and ids as one run-on paragraph), but keeps an
        # <img> whose src is a data: URL (it checks the schemes of href and cite only). An
        # image runs no script of the SVG's either
        inline = ""
        if svg:
            url = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode()
            inline = (f'<img class="autograd-lab-picture" src="{url}" '
                      'alt="The backward graph, drawn by autograd-lab" style="max-width: 100%">')
        # the live view hides this output while it runs (widget.js) by this id
        static_id = static_id or self.static_id
        parts = [f'<div class="autograd-lab" data-autograd-lab-static="{static_id}">']
        if live:  # a live view follows: what a reader without it does to get it back
            parts.append(f"<style>{NO_MODEL_RULE}</style>"
                         f'<p class="autograd-lab-rerun"><em>'
                         f'{PICTURE_NOTE if inline else RERUN_NOTE}</em></p>')
        parts.append(f'{inline}<pre>{html.escape(chr(10).join(lines))}</pre>')
        if self.link:
            parts.append(f'<p><a href="{html.escape(self.link, quote=True)}" target="_blank" '
                         'rel="noopener noreferrer">Open this run in autograd-lab</a></p>')
        parts.append("</div>")
        return "".join(parts)
