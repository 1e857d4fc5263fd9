"""Your own code: POST a script (or a notebook), get its Trace; every run has a link that shows
it again. A notebook (app/format/notebook.py) runs as its code cells, in order, as one script.

`POST /api/runs` answers when the run is done (the Trace), or at once with `?wait=false` (202:
its id and where to ask how it goes); `GET /api/runs/ID/status` says its place in line, how long
it has run and its limit; `DELETE /api/runs/ID` stops it, for the person who started it or
whoever has the server's token.

`stored_head` is shared with the run's page (/runs/{id}); `upload_policy` with the "Your code"
page (/own-code), so each page and its JSON twin come from one function.

A stored run is served without parsing it: `GET /api/runs/ID` streams the gzip JSON the store
keeps, the page and a figure read what the store keeps beside it. Only what must work on the
Trace (the gradient flow once, a drawing not yet made) parses it (store/sqlite.py: one parse shared
by the requests for a run at one time).
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from app.devices import parse_device
from app.format import Trace
from app.format.notebook import (
    NotANotebook,
    looks_like_notebook,
    notebook_bound,
    script_from_notebook,
)
from app.format.png import MAX_SIDE, png_size
from app.web.auth import has_token, upload_policy
from app.web.deps import (
    AddressDep,
    ClientDep,
    DrawingsDep,
    LayoutDep,
    SettingsDep,
    StoreDep,
    UploaderOnly,
    UploadsDep,
)
from app.web.errors import AppError
from app.web.http.responses import MEDIA, accepts_gzip, document, drawing, gzip_json, matches_etag
from app.web.runs.uploads import UploadService
from app.web.store.common import RunGone, RunReader, run_link

__all__ = ["router", "stored_head"]

router = APIRouter(tags=["your code"])

_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,97}\.py")
_NOTEBOOK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,94}\.ipynb")



async def _read_capped(request: Request, cap: int) -> bytes:
    """The request body, refusing (413) as soon as it passes what a script of `cap` bytes or a
    notebook as saved (notebook_bound) could take."""
    bound = notebook_bound(cap)
    too_big = AppError(413, f"the upload is larger than {_size(bound)}: a script may be "
                            f"{_size(cap)}, a notebook {_size(bound)} as saved (outputs "
                            f"included) with {_size(cap)} of code; send a smaller script, or "
                            "clear the notebook's outputs (Jupyter: Edit → Clear Outputs of All "
                            "Cells), save it and upload it again")
    # JSON escapes (\n, \", \uXXXX) can double a script; multipart adds its framing. The
    # script's or notebook's own size is checked exactly once decoded.
    limit = 2 * bound + 64 * 1024
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise too_big
    return bytes(data)


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 and not n % 2**20 else f"{n // 1024} KiB"


class _Upload(NamedTuple):
    source: str
    name: str
    device: str
    notebook: dict | None  # the Trace's script.notebook, for a notebook (app/format/notebook.py)


async def _submission(request: Request, body: bytes, cap: int) -> _Upload:
    """(source, name, device, notebook) from a JSON body or a multipart upload with the field
    `file`; a notebook (a .ipynb name, or a notebook's JSON as the source) becomes its script."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:  # RecursionError: [[[[... nested deep
            raise AppError(422, f"the body is not valid JSON: {exc}") from exc
        if not isinstance(payload, dict) or not isinstance(payload.get("source"), str):
            raise AppError(422, 'send {"source": "<python code>", "device": "cpu"}')
        source = payload["source"]
        name = str(payload.get("name") or "script.py")
        device = str(payload.get("device") or "cpu")
    elif kind == "multipart/form-data":
        async def replay():
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            form = await Request(request.scope, replay).form()
        except Exception as exc:  # noqa: BLE001 - python-multipart's errors vary by version
            raise AppError(422, f"the multipart form could not be read: {exc}") from exc
        try:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise AppError(422, "the upload needs a file in the form field 'file'")
            raw = await upload.read()
            name = upload.filename or "script.py"
            device = str(form.get("device") or "cpu")
        finally:
            await form.close()
        try:
            source = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AppError(422, "the file is not UTF-8 text; upload a .py script") from exc
    else:
        raise AppError(415, "send JSON ({\"source\": ..., \"device\": ...}) or a "
                                 "multipart form with the field 'file'")
    if name.lower().endswith(".ipynb") or looks_like_notebook(source):
        if len(source.encode("utf-8")) > notebook_bound(cap):
            raise AppError(413, f"the notebook is larger than {_size(notebook_bound(cap))} as "
                                "saved: clear its outputs (Jupyter: Edit → Clear Outputs of All "
                                "Cells; they are not used), save it and upload it again")
        # nbformat's schema check takes a while on a big notebook: off the event loop
        return await run_in_threadpool(_notebook_upload, source, name, parse_device(device),
                                       cap)
    if len(source.encode("utf-8")) > cap:
        raise AppError(413, f"the script is larger than {cap // 1024} KiB")
    if not source.strip():
        raise AppError(422, "the script is empty")
    if not _SAFE_NAME.fullmatch(name):  # a file name in the run folder: plain, short, .py
        name = "script.py"
    return _Upload(source, name, parse_device(device), None)


def _notebook_upload(text: str, name: str, device: str, cap: int) -> _Upload:
    """A notebook's code cells as the script that runs (422 if it is not a notebook, 413 if its
    code is past the script's limit: its outputs do not count)."""
    try:
        notebook = script_from_notebook(text)
    except NotANotebook as exc:
        raise AppError(422, str(exc)) from None
    if len(notebook.source.encode("utf-8")) > cap:
        raise AppError(413, f"the notebook's code is larger than {_size(cap)} (its outputs and "
                            "markdown are not counted); split it, or upload the part you want "
                            "to trace")
    if not _NOTEBOOK_NAME.fullmatch(name):
        name = "notebook.ipynb"
    script = name[:-len(".ipynb")] + ".py"  # the run folder's file: tracebacks name it
    return _Upload(notebook.source, script, device, notebook.document_part(name))


@router.get("/api/uploads")
def uploads(request: Request) -> dict:
    """Whether this client may run code here, whether it needs the token, the size limit and
    the sandbox's state (the JSON twin of /own-code)."""
    return upload_policy(request)


@router.post("/api/runs", response_model=Trace)
async def create_run(request: Request, _: UploaderOnly, settings: SettingsDep,
                     uploads: UploadsDep, client: ClientDep, address: AddressDep,
                     wait: bool = True) -> Response:
    """Run a script; with `wait=false`, answer at once (202) with the run's id and status link."""
    # UploaderOnly is a plain function, so FastAPI runs it in its thread pool: in the shared
    # mode a class's membership is asked of PostgreSQL, which must not hold up the event loop
    cap = settings.max_upload_bytes
    upload = await _submission(request, await _read_capped(request, cap), cap)
    # (nothing here parses the script: the worker does, so ast's thread-unsafety on 3.11 stays
    # out of the server's thread pool)
    # in a thread: a shared queue books the run in PostgreSQL (the event loop serves others)
    run_id = await run_in_threadpool(uploads.submit, client, upload.name, upload.source,
                                     upload.device, address, notebook=upload.notebook)
    if not wait:
        return JSONResponse(await run_in_threadpool(uploads.status, run_id), status_code=202)
    return await run_in_threadpool(document, await uploads.result(run_id))


# the longest a status request waits for its run to end: a client's connection is held that
# long at most, and a page still hears how the run goes once in that time
MAX_STATUS_WAIT = 10.0


@router.get("/api/runs/{run_id}/status")
async def run_status(uploads: UploadsDep, run_id: str, wait: float = 0.0) -> dict:
    """Where a run is: its state (queued, running, done, stopped, failed), its place in line,
    how long it has waited and run, and its wall-clock limit; once done, how many events it
    recorded and its error's type. With `wait` (seconds, at most 10), the answer comes when the
    run ends or that time has passed, whichever is first."""
    if wait > 0:  # (NaN is not)
        await uploads.settled(run_id, min(wait, MAX_STATUS_WAIT))
    return await run_in_threadpool(uploads.status, run_id)


@router.delete("/api/runs/{run_id}")
def stop_run(request: Request, uploads: UploadsDep, client: ClientDep, run_id: str) -> dict:
    """Stop a waiting or running run and everything it started: for the person who started it
    (their session) or whoever has the server's token."""
    return uploads.cancel(run_id, client, has_token(request))


def _not_kept(uploads: UploadService, run_id: str) -> AppError:
    if uploads.pending(run_id):
        return AppError(404, f"run {run_id!r} is still waiting or running; its page is "
                             f"there once it is done (GET /api/runs/{run_id}/status)")
    return AppError(404, f"no run {run_id!r}: it never existed or was dropped to make "
                         "room for newer runs; run the script again")


def stored_run(store: RunReader, uploads: UploadService, run_id: str) -> Trace:
    """The run's Trace, parsed (only for what must work on it: see store.get); a run that
    just ended is still held parsed by the queue."""
    recent = uploads.recent(run_id)
    doc = recent if recent is not None and store.exists(run_id) else store.get(run_id)
    if doc is None:
        raise _not_kept(uploads, run_id)
    return {**doc, "run": run_link(run_id)}


def stored_head(store: RunReader, uploads: UploadService, run_id: str) -> dict:
    """What the run's page shows of it: {"name", "source", "device", "torch", "figures",
    "notebook" (a notebook's `script.notebook`, else None)}."""
    head = store.head(run_id)
    if head is None:
        raise _not_kept(uploads, run_id)
    return head


# a stored run never changes: a browser keeps it, and asks again with its ETag
_CACHING = {"Cache-Control": "private, max-age=86400", "Vary": "Accept-Encoding"}


@router.get("/api/runs/{run_id}", response_model=Trace)
def get_run(request: Request, store: StoreDep, uploads: UploadsDep, run_id: str) -> Response:
    """A stored run's Trace, with its id and link (the JSON twin of /runs/{id}); gzipped for a
    client whose Accept-Encoding takes gzip."""
    blob = store.blob(run_id)
    if blob is None:
        raise _not_kept(uploads, run_id)
    compressed = accepts_gzip(request.headers.get("accept-encoding"))
    # one tag per encoding: the two answers' bytes differ
    headers = {**_CACHING, "ETag": f'"{run_id}.{"json.gz" if compressed else "json"}"'}
    if matches_etag(request.headers.get("if-none-match"), headers["ETag"]):
        return Response(status_code=304, headers=headers)
    pieces = store.chunks(blob)
    try:  # read before answering: a run dropped since `blob` is a 404, not a cut-off 200
        first = next(pieces, b"")
    except RunGone:
        raise _not_kept(uploads, run_id) from None
    return gzip_json(_then(first, pieces), blob.size, compressed, headers)


def _then(first: bytes, rest):
    """`first`, then the rest of the stored run; a run dropped while it is being sent ends
    the body short (the client sees it is incomplete) rather than as a server error."""
    yield first
    try:
        yield from rest
    except RunGone:
        return


@router.get("/api/runs/{run_id}/gradient-flow")
def run_gradient_flow(store: StoreDep, uploads: UploadsDep, run_id: str) -> dict:
    """Each module's gradient norm and mean |grad| in depth order, after each backward pass,
    and each parameter's norm across the passes (app/format/flow.py)."""
    flow = store.gradient_flow(run_id)
    if flow is None:
        raise _not_kept(uploads, run_id)
    return flow


@router.get("/api/runs/{run_id}/graph.{fmt}")
def run_graph(store: StoreDep, uploads: UploadsDep, drawings: DrawingsDep, client: ClientDep,
              address: AddressDep, run_id: str, fmt: str, layout: LayoutDep,
              event: int | None = None, view: int | None = None) -> Response:
    """A backward event's graph; with `view`, a graph the script asked for (make_dot). A big
    graph is drawn by module unless `layout=flat`; graph.json says how it was drawn. Drawn in
    the uploads' lane, the asker's one drawing at a time and their address's share
    (runs/drawings.py)."""
    if fmt not in MEDIA:
        return drawing(fmt, bytes)  # the 404, before reading the store
    # a stored run never changes: its drawing, once made, is served without reading the
    # Trace (only whether the run is still kept); drawn, the Trace is parsed once
    if not store.exists(run_id):
        stored_run(store, uploads, run_id)  # its 404, still waiting or never existed
    return drawing(fmt, lambda: drawings.drawing(
        ("run", run_id), lambda: stored_run(store, uploads, run_id), event, fmt, view, layout,
        client=client, address=address))



@router.get("/api/runs/{run_id}/figures/{index}.png")
def run_figure(store: StoreDep, uploads: UploadsDep, run_id: str, index: int) -> Response:
    """One matplotlib figure the script made, as the PNG it is. The worker wrote it: only a
    real PNG is served, as an image that can run nothing."""
    count = stored_head(store, uploads, run_id)["figures"]
    if not 0 <= index < count:
        raise AppError(404, f"run {run_id!r} has {count} figure(s); figures are "
                                 "numbered from 0")
    data = store.figure(run_id, index)
    if data is None:  # dropped since its head was read
        raise _not_kept(uploads, run_id)
    size = png_size(data)
    if size is None:
        raise AppError(422, f"figure {index} of run {run_id!r} is not a PNG image, so it "
                                 "is not served")
    if max(size) > MAX_SIDE:  # kept before figures were checked as they came (png.py)
        raise AppError(422, f"figure {index} of run {run_id!r} is {size[0]} x {size[1]} "
                            f"pixels, past the {MAX_SIDE} x {MAX_SIDE} a figure may be, so "
                            "it is not served")
    return Response(data, media_type="image/png", headers={
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=86400"})
