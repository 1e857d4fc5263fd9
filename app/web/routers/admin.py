"""The admin page: the whole server as the token's holder (or a named teacher) sees it, and
what they may do to it (auth.py `check_admin`; admin/ gathers what is shown).

    GET  /admin                                          the page (401/403: a page saying how in)
    GET  /api/admin                                      the same, as JSON
    POST /api/admin/classes/{code}/end                   end a class
    POST /api/admin/classes/{code}/members/{alias}/remove  remove a member (barred from then on)
    POST /api/admin/runs/{run}/stop                      stop a waiting or running run

A browser cannot send a header when it opens a page, so /admin without one answers a page with
a field for the token; admin.js then asks for /admin again with `Authorization: Bearer` (the
token kept in the same place the class bar keeps it) and puts the answer in. The actions are
POSTs of a JSON body with that header: the cross-site guard (http/guards.py) refuses another
site's, and no other site can send the header. Each action is one audit line (audit.py) that
says who did it (`by`) and that it came from here (`via=admin`). The actions are the class
routes' and the run routes' own (the classroom's `change` and `end`, UploadService.cancel),
so a member removed here is refused in the class exactly as one the teacher removed."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse

from app.web.admin.overview import overview
from app.web.audit import audit
from app.web.auth import check_admin
from app.web.deps import AddressDep, ClassroomDep, TemplatesDep, TracesDep, UploadsDep
from app.web.errors import AppError

router = APIRouter(tags=["admin"])

# who is acting: "token", "teacher:NAME" or "this_machine" (401/403 for anyone else)
AdminDep = Annotated[str, Depends(check_admin)]
CodePath = Annotated[str, Path(max_length=12)]
AliasPath = Annotated[str, Path(max_length=80)]
RunPath = Annotated[str, Path(max_length=64)]


def _sees_addresses(holder: str) -> bool:
    """Network addresses are the operator's to see (the server's token, or its machine's user
    without one), not a named teacher's: a course's teachers need not know each other's
    students' addresses."""
    return holder in ("token", "this_machine")


@router.get("/admin", response_class=HTMLResponse, include_in_schema=False)
async def admin_page(request: Request, templates: TemplatesDep, classroom: ClassroomDep,
                     uploads: UploadsDep, traces: TracesDep):
    try:
        # in a thread: a named teacher's token is a question to the store
        holder = await asyncio.to_thread(check_admin, request)
    except AppError as refused:
        return templates.TemplateResponse(
            request, "admin.html", {"locked": True, "detail": refused.detail,
                                    "asked": bool(request.headers.get("authorization"))},
            status_code=refused.status, headers=refused.headers)
    return templates.TemplateResponse(request, "admin.html", {
        "locked": False, "holder": holder,
        **await overview(classroom, uploads, traces, _sees_addresses(holder))},
        headers={"Cache-Control": "no-store"})


@router.get("/api/admin")
async def admin_state(holder: AdminDep, classroom: ClassroomDep, uploads: UploadsDep,
                      traces: TracesDep) -> dict:
    """Open classes (code, who started it, members, followers over every web process), the
    workers and the line as /healthz says them, and the recent runs per person (bounded)."""
    return await overview(classroom, uploads, traces, _sees_addresses(holder))


@router.post("/api/admin/classes/{code}/end")
async def end_class(holder: AdminDep, classroom: ClassroomDep, address: AddressDep,
                    code: CodePath) -> dict:
    session = await classroom.get(code, address, "", join=False)
    await classroom.end(session)
    audit("class_ended", code=session.code, by=holder, via="admin")
    return {"ended": session.code}


@router.post("/api/admin/classes/{code}/members/{alias}/remove")
async def remove_member(holder: AdminDep, classroom: ClassroomDep, address: AddressDep,
                        code: CodePath, alias: AliasPath) -> dict:
    session = await classroom.get(code, address, "", join=False)
    await classroom.change(session, lambda s: s.remove(alias))
    audit("member_removed", code=session.code, alias=alias, by=holder, via="admin")
    return {"removed": alias, "members": len(session.state.members)}


@router.post("/api/admin/runs/{run_id}/stop")
async def stop_run(holder: AdminDep, uploads: UploadsDep, run_id: RunPath) -> dict:
    """Stop anyone's run, as the token's holder may (UploadService.cancel; up to 10 s for a
    running one to end, in a thread)."""
    status = await asyncio.to_thread(uploads.cancel, run_id, "", True)
    audit("run_stopped", run=run_id, by=holder, via="admin")
    return status
