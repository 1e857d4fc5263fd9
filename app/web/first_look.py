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

from .drawings import Drawings
from .store import RunStore

__all__ = ["FirstLook"]

log = logging.getLogger(__name__)


class FirstLook:
    def __init__(self, store: RunStore, drawings: Drawings) -> None:
        self.store, self.drawings = store, drawings

    def __call__(self, run_id: str, doc: dict) -> None:
        backward = [e for e in doc.get("events") or () if e.get("kind") == "backward"]
        if not backward:
            return  # the page shows the error, or the views: nothing to draw first
        try:
            self.store.gradient_flow(run_id, doc)
            for fmt in ("json", "svg"):  # the page's order: the grouping, then the picture
                self.drawings.drawing(("run", run_id), lambda: doc, backward[0]["index"], fmt)
        except Exception as exc:  # noqa: BLE001 - Busy, a graph graphviz refuses: made when asked
            log.debug("first look at run %s not made: %s", run_id, exc)
