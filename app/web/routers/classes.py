"""Class sessions (app/web/classes/): a teacher starts one and shows; students follow its events.

    POST   /api/classes                      start (the teacher; the token off loopback)
    GET    /api/classes/{code}               the state, as this browser may see it (it joins)
    PATCH  /api/classes/{code}               the teacher says: {shared_address: true|false|group}
    GET    /api/classes/{code}/events        the same, pushed (server-sent events, resumable)
    PUT    /api/classes/{code}/view          the teacher shows a page: {path, query}
    POST   /api/classes/{code}/question      the teacher asks: {prompt, choices, answer}
    POST   /api/classes/{code}/reveal        the teacher reveals the answer
    DELETE /api/classes/{code}/question      the teacher puts the question away
    POST   /api/classes/{code}/answer        a student answers: {question, choice}
    PUT    /api/classes/{code}/name          a student chooses the name the teacher sees: {name}
    GET    /api/classes/{code}/runs/{run}    is this run mine (may I send it), and sent already?
    POST   /api/classes/{code}/runs          a student sends one of their own runs: {run}
    GET    /api/classes/{code}/members       the teacher sees who joined (name and alias)
    DELETE /api/classes/{code}/members/{alias}  the teacher removes one (its cookie is barred)
    DELETE /api/classes/{code}               the teacher ends the class

Every route a student uses joins the class first (one membership per browser, refused past
`per_address_people` from one address unless the room shares one: classes/state.py). A membership
also lets the browser run code without the server's token while the class is open (auth.py).
The routes are `async def`: the state lives on the event loop (see classes/session.py); the
shared classroom's questions to PostgreSQL are awaited, asked in its own threads.
"""

from __future__ import annotations

import asyncio
import json
import re

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.web.audit import audit
from app.web.auth import token_holder
from app.web.client_keys import is_browser
from app.web.deps import (
    AddressDep,
    CatalogDep,
    ClassroomDep,
    ClientDep,
    MemberSessionDep,
    StoreDep,
    TeacherOnly,
    TeacherSessionDep,
    UploadsDep,
    revoked_refusal,
    revoked_teacher,
)
from app.web.errors import AppError

router = APIRouter(tags=["classes"])

PING_SECONDS = 15  # a comment line now and then: proxies and phones keep the stream open
RETRY_MS = 1000  # how soon a browser reconnects after losing the stream
MAX_BODY = 16 * 1024  # a view, a question or an answer is a few hundred bytes
_EVENT_ID = re.compile(r"[0-9]{1,18}")
REMOVED = "the teacher removed this browser from the class"


async def _body(request: Request) -> dict:
    """The request's JSON object, read no further than MAX_BODY bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise AppError(413, f"a class request is at most {MAX_BODY} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise AppError(413, f"a class request is at most {MAX_BODY} bytes")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        raise AppError(422, "send a JSON object")
    return body


@router.post("/api/classes", status_code=201)
async def start_class(request: Request, _: TeacherOnly, classroom: ClassroomDep,
                      client: ClientDep, address: AddressDep) -> dict:
    """Start a class (or get the one this browser already teaches): its code and link."""
    if not is_browser(client):
        raise AppError(400, "open a page of this server first: the class is tied to your "
                            "browser's session cookie", "no_cookie")
    session = await classroom.start(client)
    # who may start one: the token's holder, or the person of a tokenless loopback server
    by = token_holder(request) or "this_machine"
    if session.state.teacher_name != by:  # the admin page names who teaches it
        await classroom.change(session, lambda s: s.name_teacher(by))
    audit("class_started", code=session.code, by=by, address=address)
    return session.snapshot(client)


@router.get("/api/classes/{code}")
async def class_state(session: MemberSessionDep, client: ClientDep) -> dict:
    return session.snapshot(client)


@router.get("/api/classes/{code}/events")
async def class_events(request: Request, session: MemberSessionDep, classroom: ClassroomDep,
                       client: ClientDep, address: AddressDep, following: bool = True):
    """The state whenever it changes. The event id is the state's version: a reconnecting
    browser sends the last one it saw (Last-Event-ID) and gets the state at once if newer."""
    last = request.headers.get("last-event-id", "")
    seen = int(last) if _EVENT_ID.fullmatch(last) else -1
    following = following and client != session.teacher
    classroom.open_stream(session, client, following, address)  # 429 past the caps

    async def events():
        nonlocal seen
        teacher = client == session.teacher
        shown_followed = -1  # the teacher's count of this process's followers, as last sent
        try:
            while not session.ended and not session.barred(client):
                # a named teacher's stream ends once their token is revoked (each wake-up,
                # at least every PING_SECONDS; the store's answer is remembered 5 s)
                if teacher and (name := await revoked_teacher(request, session)):
                    refused = revoked_refusal(name, session.code)
                    yield ServerSentEvent(data=json.dumps({"detail": refused.detail}),
                                          event="revoked")
                    return
                # the id is the class's, the same on every web process (Last-Event-ID resumes
                # on any); the teacher's follower count is this process's, sent as it moves
                if session.mark(client) > seen or (teacher and
                                                   session.followed != shown_followed):
                    seen = max(seen, session.mark(client))
                    shown_followed = session.followed
                    yield ServerSentEvent(data=session.snapshot_text(client), id=str(seen),
                                          retry=RETRY_MS)
                await session.changed(client, seen, PING_SECONDS, shown_followed)
            if session.barred(client):  # the teacher removed this browser: no state, a reason
                yield ServerSentEvent(data=json.dumps({"detail": REMOVED}), event="removed")
            else:
                yield ServerSentEvent(data=json.dumps(session.snapshot(client)),
                                      id=str(session.mark(client)), event="ended")
        finally:
            classroom.close_stream(session, client, following, address)

    return EventSourceResponse(events(), ping=PING_SECONDS, send_timeout=10,
                               headers={"Cache-Control": "no-store"})


@router.patch("/api/classes/{code}")
async def change_class(request: Request, session: TeacherSessionDep, classroom: ClassroomDep,
                       address: AddressDep) -> dict:
    """The teacher's switches: `shared_address` (the room shares one network address, one
    NAT: every browser from it may join, and its limits count its members)."""
    body = await _body(request)
    unknown = sorted(set(body) - {"shared_address"})
    if unknown or not body:
        raise AppError(422, "a class's switch is shared_address (true, false or \"address N\")"
                       + (f"; not {unknown[0][:40]!r}" if unknown else ""))
    await classroom.change(session,
                           lambda s: s.share_address(body["shared_address"], address))
    return {"shared_address": session.state.shared_address,
            "members": len(session.state.members)}


@router.get("/api/classes/{code}/members")
async def members(session: TeacherSessionDep, address: AddressDep) -> dict:
    """Who joined, for the teacher: each member's name (None until it chose one) and alias
    (the handle to remove it by), seconds since it joined, whether it
    answered the question asked now, its open pages, its runs sent, and which members share a
    network address ("address 1", "address 2": never the address itself)."""
    return session.roster(address)


@router.delete("/api/classes/{code}/members/{alias}")
async def remove_member(session: TeacherSessionDep, classroom: ClassroomDep, alias: str) -> dict:
    """The teacher removes a member: its answer and runs leave the class, its pages stop
    following within a moment, and its browser cannot join again."""
    await classroom.change(session, lambda s: s.remove(alias))
    audit("member_removed", code=session.code, alias=alias)
    return {"removed": alias, "members": len(session.state.members)}


@router.put("/api/classes/{code}/view")
async def show_view(request: Request, session: TeacherSessionDep,
                    classroom: ClassroomDep) -> dict:
    body = await _body(request)
    await classroom.change(session, lambda s: s.show(body.get("path"), body.get("query", "")))
    return {"version": session.version}


@router.post("/api/classes/{code}/question")
async def ask(request: Request, session: TeacherSessionDep, classroom: ClassroomDep,
              catalog: CatalogDep) -> dict:
    body = await _body(request)
    if "scenario" in body:
        # a scenario's own CLASS_QUESTION: its answer stays on the server until the reveal
        scenario = catalog.get(str(body["scenario"]))
        asked = scenario.class_question if scenario else None
        if asked is None:
            raise AppError(404, f"no scenario {str(body['scenario'])[:64]!r} with a question",
                           "no_question")
        body = asked
    question = await classroom.change(session, lambda s: s.ask(
        body.get("prompt"), body.get("choices"), body.get("answer")))
    return {"id": question["id"], "version": session.version}


@router.post("/api/classes/{code}/reveal")
async def reveal(session: TeacherSessionDep, classroom: ClassroomDep) -> dict:
    await classroom.change(session, lambda s: s.reveal())
    return {"version": session.version}


@router.delete("/api/classes/{code}/question")
async def put_question_away(session: TeacherSessionDep, classroom: ClassroomDep) -> dict:
    await classroom.change(session, lambda s: s.clear_question())
    return {"version": session.version}


@router.post("/api/classes/{code}/answer")
async def answer(request: Request, session: MemberSessionDep, classroom: ClassroomDep,
                 client: ClientDep, address: AddressDep) -> dict:
    body = await _body(request)
    await classroom.change(session, lambda s: s.answer(client, body.get("question"),
                                                       body.get("choice"), address))
    return {"version": session.version}


@router.put("/api/classes/{code}/name")
async def choose_name(request: Request, session: MemberSessionDep, classroom: ClassroomDep,
                      client: ClientDep) -> dict:
    """A student chooses the name the teacher sees (cleaned and capped; one another member has
    is made distinguishable: classes/state.py `display_name`): the name it got."""
    body = await _body(request)
    name = await classroom.change(session, lambda s: s.rename(client, body.get("name")))
    return {"name": name}


@router.get("/api/classes/{code}/runs/{run_id}")
async def run_of_mine(session: MemberSessionDep, uploads: UploadsDep, client: ClientDep,
                      run_id: str) -> dict:
    """Whether this browser started the run (so may send it to the teacher), whether it is
    on the teacher's list already, and whose it is otherwise (`by`: the name of the member who
    sent it, "the teacher", or None): a student's page offers "Send" on their own runs only,
    and titles a classmate's run as theirs."""
    started = await asyncio.to_thread(uploads.started_by, run_id)
    mine = started is not None and started == client
    return {"run": run_id[:64], "yours": mine, "sent": session.state.sent(run_id),
            "by": None if mine else session.state.whose(run_id, started)}


@router.post("/api/classes/{code}/runs")
async def send_run(request: Request, session: MemberSessionDep, classroom: ClassroomDep,
                   store: StoreDep, uploads: UploadsDep, client: ClientDep,
                   address: AddressDep) -> dict:
    """A student sends one of their own stored runs to the teacher's list (403 for another's
    run: the run queue's `started_by`)."""
    body = await _body(request)
    run_id = body.get("run")
    # the run's head only: its Trace can take hundreds of MB parsed (store/sqlite.py)
    head = await asyncio.to_thread(store.head, run_id) if isinstance(run_id, str) and \
        len(run_id) <= 64 else None
    if head is None:
        raise AppError(404, "no such run here: run your code first, then send it", "no_run")
    owner = await asyncio.to_thread(uploads.started_by, run_id)
    await classroom.change(session, lambda s: s.submit(
        client, run_id, str(head["name"] or ""), address, owner))
    # the teacher opens it later: no one's runs, however many, may push it out of the store
    await asyncio.to_thread(store.pin, run_id)
    return {"version": session.version}


@router.delete("/api/classes/{code}")
async def end_class(session: TeacherSessionDep, classroom: ClassroomDep) -> dict:
    await classroom.end(session)
    audit("class_ended", code=session.code)
    return {"ended": True}
