"""The live view in a notebook: an anywidget whose JavaScript is the run page's own modules.

`static/js/widget.js` imports graph.js, panel.js, accumulation.js and replay.js as the page does
(trace_page.js). A widget's module reaches the browser as text, where relative imports have
nothing to resolve against, so each module's `from "./x.js"` is pointed at x.js's own text as a
data: URL (`page_module`): the files themselves, unchanged but for those specifiers; nothing is
copied into this package. The page's stylesheet comes along, read in a shadow root with `:root`
as `:host`, and so does the vendored svg-pan-zoom.

The Trace travels gzipped; the drawing is the kernel's (graphviz, as TraceDisplay draws it), or,
where the kernel has no `dot`, its DOT and the vendored graphviz compiled to WebAssembly
(gzipped, sent only then), laid out in the browser by static/js/browser_layout.js. The browser
then sends its SVG back (a custom message, `{"picture": svg}`): the kernel keeps it, made safe
(picture.py), as the cell's static picture (display.py), which a notebook saved from then on
shows without a kernel.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Callable
from functools import cache

import anywidget
import traitlets

from app.format import json_text
from app.render import KINDS
from app.resources import resource_dir

from .picture import MAX_PICTURE_BYTES, too_big

__all__ = ["TraceWidget", "page_module", "modules_of"]

_IMPORT = re.compile(r'''(\bfrom\s*|\bimport\s*)(["'])\./([A-Za-z0-9_]+\.js)\2''')
PAN_ZOOM = "vendor/svg-pan-zoom-3.6.2/svg-pan-zoom.min.js"
GRAPHVIZ = "vendor/hpcc-js-wasm-graphviz-1.29.2/graphviz.js"


def _js(name: str) -> str:
    return (resource_dir("static") / "js" / name).read_text(encoding="utf-8")


def modules_of(name: str) -> list[str]:
    """`name` and every module it imports, at any depth, imported ones first."""
    found: list[str] = []

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in found:
            return
        if module in path:
            raise ValueError(f"the page's modules import in a cycle: {' → '.join(path)}")
        for _, _, imported in _IMPORT.findall(_js(module)):
            visit(imported, (*path, module))
        found.append(module)

    visit(name, ())
    return found


@cache
def page_module(name: str) -> str:
    """static/js/`name` with each relative import pointed at its module's text (a data: URL,
    the same URL wherever it is imported: one instance of each module)."""
    def inline(match: re.Match) -> str:
        text = page_module(match[3]).encode("utf-8")
        url = "data:text/javascript;base64," + base64.b64encode(text).decode("ascii")
        return f"{match[1]}{match[2]}{url}{match[2]}"

    return _IMPORT.sub(inline, _js(name))


@cache
def _css() -> str:
    text = (resource_dir("static") / "css" / "app.css").read_text(encoding="utf-8")
    return re.sub(r"(?m)^:root\b", ":host", text)


@cache
def _pan_zoom() -> str:
    return (resource_dir("static") / PAN_ZOOM).read_text(encoding="utf-8")


@cache
def graphviz_gz() -> bytes:
    """The vendored graphviz-in-WebAssembly module, gzipped."""
    return gzip.compress((resource_dir("static") / GRAPHVIZ).read_bytes(), 9)


class TraceWidget(anywidget.AnyWidget):
    """One backward pass of a Trace, drawn and explained as on the run page."""

    _esm = traitlets.Unicode().tag(sync=True)
    trace_gz = traitlets.Bytes().tag(sync=True)
    event = traitlets.Int(allow_none=True).tag(sync=True)
    view = traitlets.Int(allow_none=True).tag(sync=True)  # a view drawn, when event is None
    svg = traitlets.Unicode("").tag(sync=True)
    dot = traitlets.Unicode("").tag(sync=True)  # laid out in the browser when svg is empty
    graphviz_gz = traitlets.Bytes(b"").tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)
    link = traitlets.Unicode("").tag(sync=True)
    css = traitlets.Unicode("").tag(sync=True)
    pan_zoom_js = traitlets.Unicode("").tag(sync=True)
    kinds = traitlets.Dict().tag(sync=True)
    # the static output's id (display.py): hidden while this live view runs, not to be seen twice
    static_id = traitlets.Unicode("").tag(sync=True)
    # the drawn modules and folds (app/render/group.py's unit nodes), opened by a click, and
    # the paths open in this drawing
    units = traitlets.List().tag(sync=True)
    opened = traitlets.List(traitlets.Unicode()).tag(sync=True)
    # what the view asks the kernel to draw: {"event": N, "opened": [paths]} (an event button,
    # a click on a module); `drawn` counts the drawings sent, `problem` says why one was not
    asked = traitlets.Dict().tag(sync=True)
    drawn = traitlets.Int(0).tag(sync=True)
    problem = traitlets.Unicode("").tag(sync=True)
    # whether the kernel can draw another pass or opening (a view of show(tensor) cannot)
    redraws = traitlets.Bool(False).tag(sync=True)
    # the most bytes of a browser-made SVG the kernel keeps as the static picture; 0 where
    # it keeps none (the kernel drew one itself, or its output cannot be updated)
    keep_picture = traitlets.Int(0).tag(sync=True)

    def __init__(self, trace: dict, *, event: int | None, svg: str | None, summary: str,
                 link: str | None = None, dot: str | None = None,
                 view: int | None = None, static_id: str = "", units: list | None = None,
                 opened: list | None = None,
                 redraw: Callable[[int | None, list[str]], object] | None = None,
                 keep: Callable[[object], object] | None = None) -> None:
        in_browser = not svg and bool(dot)
        self._redraw = redraw
        self._keep = keep if in_browser else None
        super().__init__(_esm=page_module("widget.js"), css=_css(), pan_zoom_js=_pan_zoom(),
                         kinds=dict(KINDS),
                         # json_text: NaN as null (a browser's JSON.parse takes no NaN).
                         # Level 1: the bytes go to the browser once, over a local socket; on a
                         # 6-layer encoder's 2.4 MB Trace, level 6 took 0.77 s against 0.13 s
                         # for a copy 15% larger
                         trace_gz=gzip.compress(json_text.dumps(trace), 1),
                         event=event, view=view, svg=svg or "", summary=summary, link=link or "",
                         dot=dot if in_browser else "", static_id=static_id,
                         graphviz_gz=graphviz_gz() if in_browser else b"",
                         units=list(units or []), opened=list(opened or []),
                         redraws=redraw is not None,
                         keep_picture=MAX_PICTURE_BYTES if self._keep else 0)
        self.on_msg(self._message)

    def _message(self, _widget, content, _buffers) -> None:
        """The browser's SVG of the first drawing, sent once it is laid out there, or its size
        where that is past `keep_picture`: handed to `keep` (display.py) once; anything else
        the front end sends is not for us."""
        if self._keep is None or not isinstance(content, dict):
            return
        if "picture" in content:
            sent = content["picture"]
        elif "picture_size" in content:  # too big to send: the browser says only its size
            sent = too_big(content["picture_size"])
        else:
            return
        keep, self._keep = self._keep, None
        keep(sent)

    @traitlets.observe("asked")
    def _draw_asked(self, change) -> None:
        """Draw what the view asked for and send it as one change (`drawn` last: the view
        redraws once, with every part of the new drawing in place)."""
        asked = change["new"] or {}
        event, opened = asked.get("event", self.event), asked.get("opened") or []
        if self._redraw is None:
            return
        if not (event is None or (isinstance(event, int) and not isinstance(event, bool))) or \
                not isinstance(opened, list) or not all(isinstance(p, str) for p in opened):
            self.problem = "The view asked for a drawing the kernel cannot read: draw it again."
            return
        drawing = self._redraw(event, opened[:200])
        svg, dot = getattr(drawing, "svg", None), getattr(drawing, "dot", None)
        if not svg and not dot:
            self.problem = getattr(drawing, "problem", None) or "No drawing."
            return
        in_browser = not svg
        with self.hold_sync():
            self.svg, self.dot = svg or "", dot if in_browser else ""
            if in_browser and not self.graphviz_gz:
                self.graphviz_gz = graphviz_gz()
            self.event, self.units, self.opened = event, drawing.units, drawing.opened
            self.problem = ""
            self.drawn += 1

    @property
    def trace(self) -> dict:
        return json.loads(gzip.decompress(self.trace_gz))
