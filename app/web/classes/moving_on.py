"""When has the teacher moved on from where a question was asked?

A question belongs to the place it was asked at: the page (a scenario, a run, the index), the
scenario's variant, and the presenter's step. Going to another page, another variant or another
presenter step is moving on: the question, its tally and its answer are put away for everyone
(classes/state.py), so the class bar never keeps a question on a page it is not about.

Smaller changes keep it: a node, a parameter or a line picked, an event, the backward replay's
step (the class looks at the answer they just predicted), entering or leaving presenter mode
(the teacher asks on the page, then presents it, or the other way round).
"""

from __future__ import annotations

from urllib.parse import parse_qs

__all__ = ["moved_on", "place"]


def place(view: dict | None) -> dict | None:
    """Where a view is, as far as a question cares: its path, its variant, its presenter step
    (None while not presenting)."""
    if view is None:
        return None
    query = parse_qs(view.get("query") or "")
    presenting = query.get("present", [""])[0] not in ("", "0")
    return {"path": view["path"], "variant": query.get("variant", [None])[0],
            "say": query.get("say", [None])[0] if presenting else None}


def moved_on(asked_at: dict | None, now: dict | None) -> bool:
    """Has the view left the place a question was asked at (`place` of each)?"""
    if asked_at is None or now is None:
        return False  # asked before any view was shown: it belongs to the next one
    if (asked_at["path"], asked_at["variant"]) != (now["path"], now["variant"]):
        return True
    # a step to another step; into or out of presenter mode is not moving on
    return asked_at["say"] is not None and now["say"] is not None and \
        asked_at["say"] != now["say"]
