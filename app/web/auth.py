"""Who may run code on this server.

- A token configured (`--token` or AUTOGRAD_LAB_TOKEN): every upload needs it, as
  `Authorization: Bearer <token>`, wherever the server listens (so it can be tried on loopback),
  except from a member of an open class: a class grants the browsers that joined it (their
  signed session cookie, http/clients.py; not the teacher, who has the token, and not one the
  teacher removed) the right to run code, so no student ever needs the server's token. The
  right ends when the class ends or the teacher removes the member. Their runs count against the
  same per-person and per-address limits as everyone's (runs/run_book.py, Classroom.people_at).
- No token, bound to loopback and asked from loopback: the server is one person's; uploads are
  open. The client's address is checked as well as the bind, because a server started by
  `uvicorn --host 0.0.0.0` directly does not tell the settings where it listens. Only a direct
  connection counts: a request with a forwarding header (X-Forwarded-For, Forwarded, ...) was
  relayed by a proxy for someone else, and is treated as remote wherever it came from. (An ssh
  tunnel adds no header: whoever can open one is trusted like a user of this machine.)
- No token otherwise: anyone who can reach the server could run code on it, so uploads are
  refused (403) with how to start the server with a token.
- From another host, uploads also need the whole sandbox: every layer present and held in the
  start-up self-test (`sandbox.py`); while the self-test runs, 503 with Retry-After. In the
  shared mode (database_url) that is the upload hosts' sandbox, not this process's: they run
  the uploads, and each takes runs only once its own self-test held. So do a
  class's members on the server's own machine (a shared machine's local users), unless the
  operator says otherwise (`loopback_members_unsandboxed`): without the whole sandbox, an
  ordinary user's server has no whole-run memory limit, and one run could hold gigabytes.
"""

from __future__ import annotations

import secrets

from fastapi import Request

from app.format.notebook import notebook_bound
from app.web.audit import refused
from app.web.http.clients import client_address, client_key
from app.web.http.guards import forwarded
from app.web.runs.sandbox_status import sandbox_status

from .errors import AppError

__all__ = ["LOOPBACK_HOSTS", "is_loopback", "check_admin", "check_metrics_reader", "check_teacher",
           "check_uploader", "class_grant", "has_token", "token_holder", "upload_policy"]

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.") or host.startswith("::ffff:127.")


def _client(request: Request) -> str:
    """The peer's address, or "relayed" when a proxy passed the request on."""
    if forwarded(request.scope):
        return "relayed"
    return request.client.host if request.client else ""


def _refusal(request: Request, status: dict, by_membership: bool) -> AppError | None:
    """Why this client may not upload (a token would not help), or None. `by_membership`: its
    right is a class's membership, not the token."""
    settings = request.app.state.settings
    client = _client(request)
    if not settings.token and not (is_loopback(settings.host) and is_loopback(client)):
        return AppError(403, f"this server is reachable from other hosts (it listens on "
                             f"{settings.host}) and has no token, so it runs no uploaded "
                             "code; start it with `autograd-lab serve --host "
                             f"{settings.host} --token SECRET` (or set AUTOGRAD_LAB_TOKEN)"
                             " and give that token here", "no_token_configured")
    here = is_loopback(client)
    if status["ok"] or settings.database_url:
        # in the shared mode this process runs no upload: the upload hosts do, each only once
        # its own sandbox held (runs/upload_host.py), so this process's self-test decides
        # nothing (issue 39: a web container without namespaces refused every upload)
        return None
    # on this machine: its person, or the token's holder; a class's member only where allowed
    if here and (not by_membership or settings.loopback_members_unsandboxed):
        return None
    if status["state"] == "running":
        return AppError(503, "the server is still checking its sandbox (the start-up "
                             "self-test); try again in a few seconds", "sandbox_checking",
                        headers={"Retry-After": "10"})
    if here:
        return AppError(403, f"this server's sandbox is not complete ({status['summary']}), "
                             "so it runs a class member's code only where the sandbox is "
                             "whole; the token's holder may run code here, and the operator "
                             "can let class members on this machine run code anyway with "
                             "AUTOGRAD_LAB_LOOPBACK_MEMBERS_UNSANDBOXED=true",
                        "sandbox_incomplete")
    return AppError(403, f"this server's sandbox is not complete ({status['summary']}), so "
                         "it runs uploaded code only for people on the server's own machine",
                    "sandbox_incomplete")


def class_grant(request: Request) -> str | None:
    """The code of the open class whose membership lets this browser run code without the
    token, or None (classes/classroom.py: `Classroom.member_of`)."""
    return request.app.state.classroom.member_of(client_key(request))


def upload_policy(request: Request) -> dict:
    """What the "Your code" page and GET /api/uploads say about uploading from here: a member
    of an open class (`class_member`: its code) needs no token."""
    settings = request.app.state.settings
    status = sandbox_status(settings, request.app.state.selftest)
    member = class_grant(request) if settings.token else None
    refusal = _refusal(request, status, member is not None and not has_token(request))
    return {"accepts": refusal is None, "refused": refusal.detail if refusal else None,
            "token_required": bool(settings.token) and member is None,
            "class_member": member, "max_upload_bytes": settings.max_upload_bytes,
            # a notebook as saved: its code alone is held to max_upload_bytes
            "max_notebook_bytes": notebook_bound(settings.max_upload_bytes), "sandbox": status}


def token_holder(request: Request) -> str | None:
    """Whose token the request carries: "token" for the server's own, "teacher:NAME" for a
    named teacher's (store/teachers.py), None for none or a wrong one. A server without a token
    accepts none, a named teacher's included."""
    token = request.app.state.settings.token
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    value = value.strip()
    if not token or scheme.lower() != "bearer" or not value:
        return None
    if secrets.compare_digest(value.encode(), token.encode()):
        return "token"
    name = request.app.state.teachers.name_of(value[:200])
    if name is None:
        _refused_once(request)
    return f"teacher:{name}" if name else None


def _refused_once(request: Request) -> None:
    """Write a wrong token's refusal, once a request, wherever it is judged: not only where a
    route requires the token (a stop of someone's run, the upload policy also answer by it,
    and were a silent way to try tokens). Bounded per address (audit.py)."""
    if getattr(request.state, "token_refused", False):
        return
    request.state.token_refused = True
    refused("token_refused", client_address(request), path=request.url.path)


def has_token(request: Request) -> bool:
    """Does the request carry this server's token, or a named teacher's?"""
    return token_holder(request) is not None


def _require_token(request: Request, doing: str, or_else: str = "") -> None:
    """401 unless the request carries the token, when this server has one."""
    if request.app.state.settings.token and not has_token(request):
        if request.headers.get("authorization"):  # a token was given, and it is not this one
            _refused_once(request)  # (a Basic one too: token_holder reads Bearer only)
        raise AppError(401, f"{doing} needs the server's token: send the header "
                            "'Authorization: Bearer TOKEN' (the page asks for it once)"
                            + or_else, "token_needed", headers={"WWW-Authenticate": "Bearer"})


def check_uploader(request: Request) -> None:
    """Raise the HTTP error that tells this caller how to be allowed to run code: the token,
    or membership of an open class (`class_grant`), and then the sandbox for other hosts."""
    settings = request.app.state.settings
    # the token first: a class's membership may be a question to the shared store
    if not (settings.token and (has_token(request) or class_grant(request))):
        _require_token(request, "running code here",
                       "; a student in a class needs no token: open the class's link "
                       "(/c/CODE) in this browser first")
    refusal = _refusal(request, sandbox_status(settings, request.app.state.selftest),
                       bool(settings.token) and not has_token(request))
    if refusal is not None:
        raise refusal


def check_teacher(request: Request) -> None:
    """Who may start a class: the token's holder; without a token, only a person on the
    machine of a server bound to loopback (a class started from elsewhere could put any run
    on the room's screens). Students who follow need nothing."""
    settings = request.app.state.settings
    if settings.token:
        _require_token(request, "starting a class")
        return
    if not (is_loopback(settings.host) and is_loopback(_client(request))):
        raise AppError(403, "this server is reachable from other hosts and has no token, "
                            "so nobody here can start a class; start it with "
                            f"`autograd-lab serve --host {settings.host} --token SECRET` "
                            "and give that token when you start the class",
                       "no_token_configured")


def check_metrics_reader(request: Request) -> None:
    """Who may read /metrics: with a token set, its holder only, as for uploads (the counts
    say how busy the server is and who is refused); without one, anyone who can reach it, as
    for /healthz (the setting is off by default)."""
    _require_token(request, "reading the metrics")


def check_admin(request: Request) -> str:
    """Who may see and act on the whole server (the admin page, routers/admin.py): the
    server's token's holder or a named teacher; without a token, as for starting a class, only
    a person on the machine of a server bound to loopback. Their name, as `token_holder` says
    it ("this_machine" for that person)."""
    settings = request.app.state.settings
    if settings.token:
        _require_token(request, "the admin page")
        return token_holder(request) or ""
    if not (is_loopback(settings.host) and is_loopback(_client(request))):
        raise AppError(403, "this server is reachable from other hosts and has no token, so "
                            "nobody here may use its admin page; start it with "
                            f"`autograd-lab serve --host {settings.host} --token SECRET` and "
                            "give that token here", "no_token_configured")
    return "this_machine"
