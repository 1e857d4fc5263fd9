"""Everything the admin page shows, gathered once per request from the parts that already
know it: the classroom's open classes (`Classroom.open_classes`: in the shared mode every web
process's, followers summed over them), the workers and the line as /healthz reports them
(`TraceService.workers`, `RunQueue.line`), and the recent runs per person (people.py).

The questions that may wait on a database or a lock run in threads, never on the event loop.
A shared database that does not answer leaves its parts empty with a sentence why, and the
page still shows the rest. Every list is bounded (the classes by the server's
`max_classes`, members by MEMBERS_SHOWN per class, runs by people.py)."""

from __future__ import annotations

import asyncio
import time

from app.web.classes.classroom import Classroom
from app.web.runs.trace_service import TraceService
from app.web.runs.uploads import UploadService
from app.web.store.common import StoreUnavailable

from .people import RUNS_READ, by_person, short

__all__ = ["MEMBERS_SHOWN", "overview", "teacher_label"]

MEMBERS_SHOWN = 200  # per class on the page; its count says how many there are


def teacher_label(holder: str) -> str:
    """Who started a class, as the page says it (auth.token_holder's word, kept by the class)."""
    if holder == "token":
        return "the server's token"
    if holder.startswith("teacher:"):
        return short(holder.removeprefix("teacher:"), 60)
    if holder == "this_machine":
        return "this machine's user"
    return "not recorded"  # a class started by the release before this one


async def overview(classroom: Classroom, uploads: UploadService, traces: TraceService,
                   addresses: bool) -> dict:
    """{classes, workers, queue, people, problems}: `problems`, the parts that could not be
    read and why (a shared database away)."""
    problems: list[str] = []

    async def read(what: str, ask, empty):
        try:
            return await ask()
        except StoreUnavailable as exc:  # the shared database: the rest is still shown
            problems.append(f"{what}: {exc}")
            return empty

    classes = await read("classes", classroom.open_classes, [])
    queue = await read("the line", lambda: asyncio.to_thread(uploads.line), None)
    runs = await read("runs", lambda: asyncio.to_thread(uploads.latest, RUNS_READ), [])
    states = [state for state, _ in classes]
    return {"classes": [_class(state, followers) for state, followers in classes],
            "workers": await asyncio.to_thread(traces.workers), "queue": queue,
            "people": by_person(runs, states, addresses), "problems": problems}


def _class(state, followers: int) -> dict:
    now = time.time()
    members = sorted(state.members.values(), key=lambda m: m.joined)
    return {"code": state.code, "teacher": teacher_label(state.teacher_name),
            "started": state.created, "started_s_ago": round(max(0.0, now - state.created)),
            "members_count": len(members), "followers": followers,
            "removed": len(state.removed),
            "members": [{"alias": m.alias, "name": short(m.name) if m.name else None,
                         "joined_s_ago": round(max(0.0, now - m.joined))}
                        for m in members[:MEMBERS_SHOWN]]}
