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
- one person has at most one upload drawing being made at a time, and one network address at
  most its share of the lane's graphviz (`_address_share`: never every slot, since a fresh
  cookie is one page load away, unless a class says its room shares that address); another
  of theirs meanwhile waits TURN_PATIENCE (the page's next picture follows a run's first look),
  then is answered TooMany (429 with Retry-After).
  Asking for the picture being made joins it. graph.json and graph.dot run no graphviz and
  take no turn;
- a person has at most REQUESTS_AT_ONCE uncached upload drawing requests under way (an address
  that many for each person it stands for, at most ADDRESS_REQUESTS_AT_MOST), and past them is
  refused at once: a waiting request holds one of the server's threads, so a person waiting in
  a hundred requests had held them all;
- a layout graphviz gave up on (past `drawing_timeout`, or failed: LayoutFailed) is remembered
  per (Trace, event or view, grouping), whatever the format and type size, and refused at once;
  after GIVE_UPS_PER_TRACE of them, only a picture of that Trace under half as large as the
  smallest given up on is started (the groupings are the asker's to choose: each would have
  been another whole `drawing_timeout`);
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
from .run_book import PeopleAt, TooMany

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
# a person's uncached upload drawing requests at once (being drawn, waiting for their turn or
# for the same picture): one being made and the few a run's page asks for side by side (its
# views' pictures load together); an address, that many for each person it stands for
REQUESTS_AT_ONCE = 5
# an address's requests under way at most, whatever the people it stands for: under half of the
# server's threads for sync routes (40, anyio's default), so scenarios' drawings find one
ADDRESS_REQUESTS_AT_MOST = 16
# layouts graphviz gave up on before only a much smaller picture of the Trace is started: the
# first look's, and one more grouping the person tried (each cost a whole drawing_timeout)
GIVE_UPS_PER_TRACE = 2


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
    """A leader's answer meaning "its person (or address) was busy", and why: another person
    who joined it is not told that it was theirs."""
    client: str | None
    why: str = ""


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
        self._drawing_at: dict[str, int] = {}  # addresses' upload drawings being made
        self._turns = threading.Condition()
        self._asking: dict[tuple, int] = {}  # uncached requests under way, per person/address
        # per Trace: layouts graphviz gave up on, and the smallest of them (nodes + edges drawn)
        self._give_ups: LRU[tuple[int, int]] = LRU(TRACES_COUNTED)
        self.slots = settings.max_drawings
        self.per_address_people = settings.per_address_people
        # how many people an address stands for in a class whose room shares one (app.py sets
        # it once the classroom exists: the drawings know no classes)
        self.people_at: PeopleAt | None = None
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
                client: str | None = None, address: str = "") -> bytes:
        """The graph of one event (or one of the script's views) as svg, png, dot, or json
        (its units and grouping), drawn as `layout` asks: by default a big graph by module
        (RenderError, EventNotFound, Busy, TooMany). `key` names the Trace for good (a
        scenario's inputs, a stored run's id); `load` gives the Trace, called only when not
        kept. `client`: the person an upload's drawing is for, `address` where they are (a
        network address key, http/clients.py); None for a scenario's."""
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
        with self._asking_slot(client, address):
            return self._uncached(lane, key, rkey, load, event, fmt, view, layout, client,
                                  address)

    def _uncached(self, lane: _Lane, key: tuple, rkey: tuple, load: Callable[[], dict],
                  event: int | None, fmt: str, view: int | None, layout: Layout,
                  client: str | None, address: str) -> bytes:
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
            data = self._renders.run(dkey, lambda: self._render(lane, client, address, dkey,
                                                                graph, grouping, analysis,
                                                                fmt, layout),
                                     patience=FOLLOWER_PATIENCE)
        except TimeoutError:  # the same picture is being drawn for someone else: come back
            self.meter.drew("timeout")
            raise Busy("this drawing is being made for another request: try again in a few "
                       "seconds") from None
        if isinstance(data, _NotYours):
            if data.client == client:
                raise TooMany(data.why)
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

    def _render(self, lane: _Lane, client: str | None, address: str, dkey: tuple, graph: dict,
                grouping, analysis: Analysis, fmt: str,
                layout: Layout) -> bytes | RenderError | _NotYours:
        kept = lane.drawn.get(dkey)
        if kept is not None:  # the same picture, asked for with paths the graph lacks
            self.meter.drew("cached")
            return kept
        graphviz = fmt in ("svg", "png")
        try:
            with self._turn(client if graphviz else None, address):
                self._count(dkey[0], dkey)
                with lane.gate.enter():
                    data = self._draw(dkey[0], graph, grouping, analysis, fmt, layout)
        except _PersonBusy as busy:
            return _NotYours(client, str(busy))
        if isinstance(data, LayoutFailed):
            self._failed.put(dkey[:4], data)  # any format, any type size: the same layout
        # counted per drawing made, not per request: those that waited for this one (the
        # single flight) cost no graphviz of their own
        self.meter.drew("failed" if isinstance(data, RenderError) else "drawn")
        lane.drawn.put(dkey, data)
        return data

    def _draw(self, key: Hashable, graph: dict, grouping, analysis: Analysis, fmt: str,
              layout: Layout) -> bytes | RenderError:
        if fmt == "json":
            return json.dumps(layout_document(graph, grouping, analysis)).encode("utf-8")
        drawn = group_graph(graph, grouping, analysis)
        size = len(drawn["nodes"]) + len(drawn["edges"])
        self._check_give_ups(key, size)
        try:
            return render_graph(drawn, fmt, font=layout.font, timeout=self.timeout)
        except LayoutFailed as exc:
            with self._lock:
                count, smallest = self._give_ups.get(key) or (0, size)
                self._give_ups.put(key, (count + 1, min(smallest, size)))
            return _fresh(exc)  # kept without its traceback (see _fresh)
        except RenderError as exc:
            return _fresh(exc)

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

    def _check_give_ups(self, key: Hashable, size: int) -> None:
        """TooMany once graphviz gave up on GIVE_UPS_PER_TRACE layouts of this Trace, for a
        drawing more than half as large (nodes and edges) as the smallest of them: each new
        grouping (depth, modules opened) would start another render as long as those. A much
        smaller one (fewer modules open) is still drawn."""
        count, smallest = self._give_ups.get(key) or (0, 0)
        if count >= GIVE_UPS_PER_TRACE and 2 * size > smallest:
            raise TooMany(f"graphviz gave up on {count} drawings of this graph (each took "
                          f"longer than {self.timeout:g} s, or failed), so no drawing of it more "
                          f"than half as large as the smallest of those ({smallest // 2} nodes "
                          f"and edges; this one has {size}) is started here: it is too big for "
                          "graphviz on this server. Open fewer modules (a smaller depth), use a "
                          "drawing already made, or export the Trace JSON and draw it elsewhere")

    def _address_share(self, address: str) -> tuple[int, int]:
        """(upload drawings one address may have made at once, its requests under way). As
        many drawings as the people it stands for, but never every slot while there are
        several, so that another place is always drawn; where a class's teacher said the room
        shares the address (people_at counts its members there), every slot: it is the room.
        Its requests: REQUESTS_AT_ONCE for each person, at most ADDRESS_REQUESTS_AT_MOST."""
        try:
            room = self.people_at(address) if self.people_at is not None else 0
        except Exception:  # noqa: BLE001 - the classes' database away: the server's setting
            room = 0
        people = max(self.per_address_people, room)
        slots = self.slots if room > self.per_address_people else self.slots - 1
        return (max(1, min(people, slots)),
                min(REQUESTS_AT_ONCE * people, ADDRESS_REQUESTS_AT_MOST))

    @contextmanager
    def _asking_slot(self, client: str | None, address: str):
        """One of the person's (and their address's) uncached requests under way, or TooMany
        at once: decided without waiting, so no thread is held by a refused request."""
        if client is None:
            yield
            return
        # asked before the lock is taken: the classroom's count is not the drawings' to hold up
        most = self._address_share(address)[1] if address else 0
        keys = [("person", client)] + ([("address", address)] if address else [])
        with self._lock:
            if self._asking.get(keys[0], 0) >= REQUESTS_AT_ONCE:
                raise TooMany(f"you have {REQUESTS_AT_ONCE} drawings being made or waiting, as "
                              "many as one person may at once: wait for them (the page shows "
                              "each when it is ready), then ask for this one again")
            if address and self._asking.get(keys[1], 0) >= most:
                raise TooMany(f"{most} drawings asked for from your network "
                              "address are being made or waiting, as many as one address may "
                              "at once here: try again in a few seconds")
            for k in keys:
                self._asking[k] = self._asking.get(k, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for k in keys:
                    self._asking[k] -= 1
                    if not self._asking[k]:
                        del self._asking[k]

    @contextmanager
    def _turn(self, client: str | None, address: str = ""):
        """The person's one upload drawing at a time, and their address's share (none for a
        scenario's)."""
        if client is None:
            yield
            return
        share = self._address_share(address)[0] if address else 0

        def free() -> bool:
            return client not in self._drawing_for and \
                (not address or self._drawing_at.get(address, 0) < share)

        with self._turns:
            # a short wait: the page's next picture follows the run's first look, drawn in
            # well under a second for a real run's graph
            if not self._turns.wait_for(free, TURN_PATIENCE):
                if client in self._drawing_for:
                    raise _PersonBusy("one of your drawings is being made: each person has one "
                                      "made at a time. Wait for it (the page shows it when it "
                                      "is ready), then ask for this one again")
                raise _PersonBusy(f"{share} drawing(s) asked for from your network address are "
                                  "being made, as many as one address may have at once here "
                                  "(graphviz is kept for other places too): try again when one "
                                  "is drawn")
            self._drawing_for.add(client)
            if address:
                self._drawing_at[address] = self._drawing_at.get(address, 0) + 1
        try:
            yield
        finally:
            with self._turns:
                self._drawing_for.discard(client)
                if address:
                    self._drawing_at[address] -= 1
                    if not self._drawing_at[address]:
                        del self._drawing_at[address]
                self._turns.notify_all()


class _PersonBusy(Exception):
    """This person already has an upload drawing being made."""


def _fresh(error: RenderError) -> RenderError:
    """A kept RenderError raised anew each time: raising the kept one would add each caller's
    frames to its traceback, and those frames hold the parsed Trace they drew from (a run's
    first look held its whole Trace for as long as the refusal was kept)."""
    return type(error)(*error.args)  # LayoutFailed stays itself
