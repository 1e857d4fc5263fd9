"""Drawings of Traces, apart from the Traces: graphviz output and grouping facts, cached.

A drawing is kept by (the trace's key, event or view, `Layout`, format), and also under the
grouping it came to (requests that differ only in paths the graph lacks draw the same picture).
The Trace is asked for through a `load` callable only when the drawing is not kept: a stored
run's cached drawing is served without reading, un-gzipping or parsing its Trace.

graphviz runs in the server's own processes: as many at once as there are cores, a few waiting,
the rest told to come back (Busy), however many drawings are asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from app.lru import LRU
from app.render import (
    RenderError,
    choose_grouping,
    event_graph,
    group_graph,
    layout_document,
    render_graph,
)
from app.render.group import Analysis, analyze
from app.single_flight import SingleFlight
from app.web.metrics import DrawingMeter
from app.web.settings import Settings

from .gate import Busy, Gate

__all__ = ["Drawings", "Layout"]

ANALYSES_KEPT = 16  # graphs whose grouping facts are kept (a big one's are a few MB)
# how long a request waits for the same picture drawn for another before it is told Busy:
# joining costs no gate place, so it must not hold its thread for a whole slow render
FOLLOWER_PATIENCE = 20.0


@dataclass(frozen=True)
class Layout:
    """How a drawing is asked for: flat, or by module (a depth, 0 for every module open; the
    module paths opened; repeats folded). No depth: the readable grouping for its size.
    `font`: the label type's scale (app/render/dot.py FONT_SCALES; a projector's page asks
    for larger type than the 1x of exports and the CLI)."""
    flat: bool = False
    depth: int | None = None
    opened: frozenset[str] = frozenset()
    fold: bool = True
    font: float = 1.0


class Drawings:
    def __init__(self, settings: Settings, meter: DrawingMeter | None = None) -> None:
        self.meter = meter or DrawingMeter()  # drawings made and cache hits, for the metrics
        self.gate = Gate(settings.max_drawings, settings.queue_size)
        # a graph that cannot be drawn is kept as its RenderError: not drawn again and again
        self._drawn: LRU[bytes | RenderError] = LRU(settings.cache_size * 2)
        self._analyses: LRU[Analysis] = LRU(ANALYSES_KEPT)
        # one render per picture at a time: the first look a run's end prepares (first_look.py)
        # and the page asking for it meanwhile wait for one graphviz, not two
        self._renders = SingleFlight()

    def _kept(self, key: tuple) -> bytes | None:
        kept = self._drawn.get(key)
        if isinstance(kept, RenderError):
            raise _fresh(kept)
        return kept

    def _analysis(self, gkey: tuple, graph: dict) -> Analysis:
        """A graph's module paths and folds, worked out once for all its groupings."""
        found = self._analyses.get(gkey)
        if found is None:
            found = analyze(graph)
            self._analyses.put(gkey, found)
        return found

    def drawing(self, key: tuple, load: Callable[[], dict], event: int | None, fmt: str,
                view: int | None = None, layout: Layout | None = None) -> bytes:
        """The graph of one event (or one of the script's views) as svg, png, dot, or json
        (its units and grouping), drawn as `layout` asks: by default a big graph by module
        (RenderError, EventNotFound, Busy). `key` names the Trace for good (a scenario's
        inputs, a stored run's id); `load` gives the Trace, called only when not kept."""
        layout = layout or Layout()
        rkey = (key, event, view, layout, fmt)
        try:
            kept = self._kept(rkey)
        except RenderError:
            self.meter.drew("cached")  # a refusal kept: graphviz is not asked again
            raise
        if kept is not None:
            self.meter.drew("cached")
            return kept
        graph = event_graph(load(), event, view)
        # grouping a big (or forged) graph is work too: it waits its turn with the drawings
        with self.gate.enter():
            analysis = self._analysis((key, event, view), graph)
            grouping = choose_grouping(graph, flat=layout.flat, depth=layout.depth,
                                       opened=layout.opened, fold=layout.fold,
                                       analysis=analysis)
        # graph.json (units and grouping) is the same whatever the label type
        dkey = (key, event, view, grouping, fmt, 1.0 if fmt == "json" else layout.font)
        try:
            data = self._renders.run(dkey, lambda: self._render(dkey, graph, grouping, analysis,
                                                                fmt, layout),
                                     patience=FOLLOWER_PATIENCE)
        except TimeoutError:  # the same picture is being drawn for someone else: come back
            self.meter.drew("timeout")
            raise Busy("this drawing is being made for another request: try again in a few "
                       "seconds") from None
        self._drawn.put(rkey, data)
        if isinstance(data, RenderError):
            raise _fresh(data)
        return data

    def _render(self, dkey: tuple, graph: dict, grouping, analysis: Analysis, fmt: str,
                layout: Layout) -> bytes | RenderError:
        kept = self._drawn.get(dkey)
        if kept is not None:  # the same picture, asked for with paths the graph lacks
            self.meter.drew("cached")
            return kept
        with self.gate.enter():
            if fmt == "json":
                data: bytes | RenderError = json.dumps(
                    layout_document(graph, grouping, analysis)).encode("utf-8")
            else:
                try:
                    data = render_graph(group_graph(graph, grouping, analysis), fmt,
                                        font=layout.font)
                except RenderError as exc:
                    data = _fresh(exc)  # kept without its traceback (see _fresh)
        # counted per drawing made, not per request: those that waited for this one (the
        # single flight) cost no graphviz of their own
        self.meter.drew("failed" if isinstance(data, RenderError) else "drawn")
        self._drawn.put(dkey, data)
        return data


def _fresh(error: RenderError) -> RenderError:
    """A kept RenderError raised anew each time: raising the kept one would add each caller's
    frames to its traceback, and those frames hold the parsed Trace they drew from (a run's
    first look held its whole Trace for as long as the refusal was kept)."""
    return RenderError(*error.args)
