"""What a run's page asks for first, made as the run ends: its gradient flow and the first
backward pass's drawing (graph.json and the SVG), from the Trace the queue still holds parsed.

The own-code page goes to the run's page the moment the run's status says done; that page
then fetches the Trace and asks for these. Made meanwhile, on the run's own thread, they are
ready (or being made: the page's request waits for the same render, drawings.py) instead of
started only when asked. On a 48-layer encoder that was 0.3 s of the wait for the first picture
(bench/paste_to_picture.py). Nothing here may fail a run: a drawing that cannot be made now is
made when asked, as before.
"""

from __future__ import annotations

import logging

from app.render import EventNotFound, RenderError
from app.render.group import READABLE_NODES
from app.web.store.sqlite import RunStore

from .drawings import Drawings, Layout
from .gate import Busy
from .run_book import TooMany

__all__ = ["FirstLook"]

log = logging.getLogger(__name__)

# the page's type for a graph small enough to be drawn node by node (static/js/trace_page.js
# PAGE_FONT): what it asks for first is what is drawn here, or the work is wasted
PAGE_FONT = 2.0


class FirstLook:
    def __init__(self, store: RunStore, drawings: Drawings) -> None:
        self.store, self.drawings = store, drawings

    def __call__(self, run_id: str, doc: dict, client: str, address: str = "") -> None:
        """Made for the run's person (`client`, from `address`): their one drawing at a time,
        within their address's share (drawings.py)."""
        backward = [e for e in doc.get("events") or () if e.get("kind") == "backward"]
        if not backward:
            return  # the page shows the error, or the views: nothing to draw first
        first = backward[0]
        key, index = ("run", run_id), first["index"]
        try:
            self.store.gradient_flow(run_id, doc)
            if len(first["graph"]["nodes"]) <= READABLE_NODES:  # drawn node by node, larger
                self.drawings.drawing(key, lambda: doc, index, "svg",
                                      layout=Layout(font=PAGE_FONT), client=client,
                                      address=address)
            else:  # the page asks how it is grouped, then for that picture (same grouping)
                for fmt in ("json", "svg"):
                    self.drawings.drawing(key, lambda: doc, index, fmt, client=client,
                                          address=address)
        except (Busy, TooMany, RenderError, EventNotFound) as exc:  # made when asked, as before
            log.debug("first look at run %s not made: %s", run_id, exc)
        except Exception:  # noqa: BLE001 - a bug of ours: said, and the run is still served
            log.exception("first look at run %s", run_id)
