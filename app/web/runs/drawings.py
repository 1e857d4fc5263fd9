"""Drawings of Traces, apart from the Traces: graphviz output and grouping facts, cached.

A drawing is kept by (the trace's key, event or view, `Layout`, format), and also under the
grouping it came to (requests that differ only in paths the graph lacks draw the same picture).
The Trace is asked for through a `load` callable only when the drawing is not kept: a stored
run's cached drawing is served without reading, un-gzipping or parsing its Trace.

graphviz is a resource shared fairly (issue 38: one forged run's drawings had taken every slot
and evicted the scenarios'):
- two lanes, as runs have: scenarios' drawings (no `client`) and uploads' (a `client`), each
  with a gate (as many at once as `max_drawings`, a few waiting, the rest told Busy) and a
  cache of its own, so a teacher's scenario never waits behind uploads' drawings, nor is
  evicted by them;
- one person has at most one upload drawing being made at a time; another of theirs meanwhile
  is answered TooMany (429 with Retry-After) at once rather than waiting: a waiting request
  holds one of the server's threads for as long as a render may take (minutes), so a person
  waiting in many requests would hold them all (it waits TURN_PATIENCE first: the page's next
  picture follows a run's first look). Asking for the picture being made joins it. graph.json
  and graph.dot run no graphviz and take no turn;
- a layout graphviz gave up on (past `drawing_timeout`, or failed: LayoutFailed) is remembered
  per (Trace, event or view, grouping), whatever the format and type size, and refused at once;
- at most `drawing_variants` distinct drawings (grouping, type size, format) are made of one
  Trace; past it, TooMany saying to use one already made, so a flood of variants can neither
  keep graphviz busy nor evict the others' drawings.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable
from contextlib import contextmanager
from dataclasses import dataclass, field

from app.lru import LRU
from app.render import (
    LayoutFailed,
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
from .run_book import TooMany

__all__ = ["Drawings", "Layout"]

ANALYSES_KEPT = 16  # graphs whose grouping facts are kept (a big one's are a few MB)
# how long a request waits for the same picture drawn for another before it is told Busy:
# joining costs no gate place, so it must not hold its thread for a whole slow render
FOLLOWER_PATIENCE = 20.0
FAILURES_KEPT = 1024  # layouts graphviz gave up on, remembered (each a sentence)
# how long a person's drawing waits for their drawing under way before TooMany: long enough for
# a real graph's, far shorter than a render past graphviz's time
TURN_PATIENCE = 3.0
TRACES_COUNTED = 4096  # Traces whose drawings made are counted against drawing_variants


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


class _Lane:
    """One lane's gate and caches: the scenarios', or the uploads'."""

    def __init__(self, settings: Settings, kept: int) -> None:
        self.gate = Gate(settings.max_drawings, settings.queue_size)
        # a graph that cannot be drawn is kept as its RenderError: not drawn again and again
        self.drawn: LRU[bytes | RenderError] = LRU(kept)
        self.analyses: LRU[Analysis] = LRU(ANALYSES_KEPT)


@dataclass
class _Made:
    """What one Trace has had drawn: its distinct drawings, and the request keys kept as
    other names of them (bounded too: `open` paths the graph lacks make endless names)."""
    drawings: set = field(default_factory=set)
    names: int = 0


@dataclass(frozen=True)
class _NotYours:
    """A leader's answer meaning "its person was busy": another person who joined it is not
    told that it was theirs."""
    client: str | None


class Drawings:
    def __init__(self, settings: Settings, meter: DrawingMeter | None = None) -> None:
        self.meter = meter or DrawingMeter()  # drawings made and cache hits, for the metrics
        self.timeout = settings.drawing_timeout
        self.variants = settings.drawing_variants
        self.scenarios = _Lane(settings, settings.cache_size * 2)
        self.uploads = _Lane(settings, settings.cache_size * 4)
        self._failed: LRU[RenderError] = LRU(FAILURES_KEPT)
        self._made: LRU[_Made] = LRU(TRACES_COUNTED)
        self._lock = threading.Lock()
        self._drawing_for: set[str] = set()  # people with an upload drawing being made
        self._turns = threading.Condition()
        # one render per picture at a time: the first look a run's end prepares (first_look.py)
        # and the page asking for it meanwhile wait for one graphviz, not two
        self._renders = SingleFlight()

    def _kept(self, lane: _Lane, key: tuple) -> bytes | None:
        kept = lane.drawn.get(key)
        if isinstance(kept, RenderError):
            raise _fresh(kept)
        return kept

    def _analysis(self, lane: _Lane, gkey: tuple, graph: dict) -> Analysis:
        """A graph's module paths and folds, worked out once for all its groupings."""
        found = lane.analyses.get(gkey)
        if found is None:
            found = analyze(graph)
            lane.analyses.put(gkey, found)
        return found

    def drawing(self, key: tuple, load: Callable[[], dict], event: int | None, fmt: str,
                view: int | None = None, layout: Layout | None = None,
                client: str | None = None) -> bytes:
        """The graph of one event (or one of the script's views) as svg, png, dot, or json
        (its units and grouping), drawn as `layout` asks: by default a big graph by module
        (RenderError, EventNotFound, Busy, TooMany). `key` names the Trace for good (a
        scenario's inputs, a stored run's id); `load` gives the Trace, called only when not
        kept. `client`: the person an upload's drawing is for; None for a scenario's."""
        layout = layout or Layout()
        lane = self.scenarios if client is None else self.uploads
        rkey = (key, event, view, layout, fmt)
        try:
            kept = self._kept(lane, rkey)
        except RenderError:
            self.meter.drew("cached")  # a refusal kept: graphviz is not asked again
            raise
        if kept is not None:
            self.meter.drew("cached")
            return kept
        doc = load()
        graph = event_graph(doc, event, view)
        if event is None and view is None:  # the first backward event, by its index: one
            # picture whether asked for as it or as the default (the first look names it)
            event = next(e["index"] for e in doc["events"] if e.get("kind") == "backward")
        # grouping a big (or forged) graph is work too: it waits its turn with the drawings
        with lane.gate.enter():
            analysis = self._analysis(lane, (key, event, view), graph)
            grouping = choose_grouping(graph, flat=layout.flat, depth=layout.depth,
                                       opened=layout.opened, fold=layout.fold,
                                       analysis=analysis)
        failed = self._failed.get((key, event, view, grouping)) if fmt != "json" else None
        if failed is not None:  # graphviz gave up on this layout: not asked again
            self.meter.drew("cached")
            raise _fresh(failed)
        # graph.json (units and grouping) is the same whatever the label type
        dkey = (key, event, view, grouping, fmt, 1.0 if fmt == "json" else layout.font)
        try:
            data = self._renders.run(dkey, lambda: self._render(lane, client, dkey, graph,
                                                                grouping, analysis, fmt,
                                                                layout),
                                     patience=FOLLOWER_PATIENCE)
        except TimeoutError:  # the same picture is being drawn for someone else: come back
            self.meter.drew("timeout")
            raise Busy("this drawing is being made for another request: try again in a few "
                       "seconds") from None
        if isinstance(data, _NotYours):
            if data.client == client:
                raise TooMany("one of your drawings is being made: each person has one made "
                              "at a time. Wait for it (the page shows it when it is ready), "
                              "then ask for this one again")
            raise Busy("this drawing was asked for by someone who is waiting for another: try "
                       "again in a few seconds")
        self._name(lane, key, rkey, data)
        if isinstance(data, RenderError):
            raise _fresh(data)
        return data

    def _name(self, lane: _Lane, key: tuple, rkey: tuple, data: bytes | RenderError) -> None:
        """Keep `data` under the request's own key too, up to twice drawing_variants names a
        Trace (past them it is found through its grouping, after a parse)."""
        with self._lock:
            made = self._made.get(key)
            if made is None or made.names >= 2 * self.variants:
                return
            made.names += 1
        lane.drawn.put(rkey, data)

    def _render(self, lane: _Lane, client: str | None, dkey: tuple, graph: dict, grouping,
                analysis: Analysis, fmt: str, layout: Layout) -> bytes | RenderError | _NotYours:
        kept = lane.drawn.get(dkey)
        if kept is not None:  # the same picture, asked for with paths the graph lacks
            self.meter.drew("cached")
            return kept
        try:
            with self._turn(client if fmt in ("svg", "png") else None):
                self._count(dkey[0], dkey)
                with lane.gate.enter():
                    data = self._draw(graph, grouping, analysis, fmt, layout)
        except _PersonBusy:
            return _NotYours(client)
        if isinstance(data, LayoutFailed):
            self._failed.put(dkey[:4], data)  # any format, any type size: the same layout
        # counted per drawing made, not per request: those that waited for this one (the
        # single flight) cost no graphviz of their own
        self.meter.drew("failed" if isinstance(data, RenderError) else "drawn")
        lane.drawn.put(dkey, data)
        return data

    def _draw(self, graph: dict, grouping, analysis: Analysis, fmt: str,
              layout: Layout) -> bytes | RenderError:
        if fmt == "json":
            return json.dumps(layout_document(graph, grouping, analysis)).encode("utf-8")
        try:
            return render_graph(group_graph(graph, grouping, analysis), fmt, font=layout.font,
                                timeout=self.timeout)
        except RenderError as exc:
            return _fresh(exc)  # kept without its traceback (see _fresh)

    def _count(self, key: Hashable, dkey: tuple) -> None:
        """One more distinct drawing of `key`'s Trace, or TooMany past drawing_variants."""
        with self._lock:
            made = self._made.get(key)
            if made is None:
                made = _Made()
                self._made.put(key, made)
            if dkey in made.drawings:
                return
            if len(made.drawings) >= self.variants:
                raise TooMany(f"{self.variants} different drawings of this graph have been "
                              "made already (groupings, type sizes and formats): ask for one of "
                              "those, for instance the page's own, or export the Trace JSON")
            made.drawings.add(dkey)

    @contextmanager
    def _turn(self, client: str | None):
        """The person's one upload drawing at a time (none for a scenario's)."""
        if client is None:
            yield
            return
        with self._turns:
            # a short wait: the page's next picture follows the run's first look, drawn in
            # well under a second for a real run's graph
            if not self._turns.wait_for(lambda: client not in self._drawing_for,
                                        TURN_PATIENCE):
                raise _PersonBusy()
            self._drawing_for.add(client)
        try:
            yield
        finally:
            with self._turns:
                self._drawing_for.discard(client)
                self._turns.notify_all()


class _PersonBusy(Exception):
    """This person already has an upload drawing being made."""


def _fresh(error: RenderError) -> RenderError:
    """A kept RenderError raised anew each time: raising the kept one would add each caller's
    frames to its traceback, and those frames hold the parsed Trace they drew from (a run's
    first look held its whole Trace for as long as the refusal was kept)."""
    return type(error)(*error.args)  # LayoutFailed stays itself
