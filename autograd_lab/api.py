"""`trace` and `show`: a Trace from code, a callable, a tensor or a stored run, and its display.

Code and callables run here, in the kernel, under the tracer the worker uses (app/trace), with
no sandbox: they are the person's own, on their own machine.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

from app.format import InvalidTrace, validate

from .display import TraceDisplay

__all__ = ["trace", "show", "fetch_run", "SERVER_ENV"]

SERVER_ENV = "AUTOGRAD_LAB_URL"
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# /runs/ID (the run's page) or /api/runs/ID (its JSON), under any prefix the server sits at
_RUN_PATH = re.compile(r"^(?P<prefix>.*?)/(?:api/)?runs/(?P<id>[A-Za-z0-9_-]{1,64})/?$")
MAX_RUN_BYTES = 256 * 1024 * 1024


def trace(fn_or_code, namespace: dict | None = None, *, name: str | None = None) -> dict:
    """The Trace document of a function called with no arguments, or of code given as text
    (run as a cell: in `namespace`, by default the caller's globals, which it changes as a
    cell would). Runs in this process, without the server's sandbox."""
    from app.trace.in_namespace import trace_call, trace_source

    if isinstance(fn_or_code, str):
        ns = namespace if namespace is not None else sys._getframe(1).f_globals
        return trace_source(fn_or_code, ns, name=name or "cell")
    if callable(fn_or_code):
        return trace_call(fn_or_code, name=name)
    raise TypeError(f"trace() takes a function to call with no arguments or code as a str, "
                    f"not {type(fn_or_code).__name__}")


def show(x, *, event: int | None = None, layout: str | None = None, server: str | None = None,
         namespace: dict | None = None, draw: str | None = None,
         whole: bool = False) -> TraceDisplay:
    """Show `x` in the notebook: a tensor (its graph as torchviz's make_dot walks it, its
    parameters named from the modules in `namespace`, by default the caller's variables), a
    Trace document, or a stored run's id or URL on an autograd-lab server (`server`, else the
    AUTOGRAD_LAB_URL environment variable). `draw`: "kernel" (graphviz's `dot` here, the default
    where there is one) or "browser" (graphviz compiled to WebAssembly, in the live view).
    `whole`: the output stores the whole Trace, not only the pass drawn without values."""
    link = None
    if isinstance(x, dict):
        doc = x
        if not isinstance(doc.get("events"), list):
            raise ValueError("this dict is not a Trace document (it has no `events` list); "
                             "pass a tensor, a Trace, or a stored run's id or URL")
    elif isinstance(x, str):
        doc, link = fetch_run(x, server)
    elif type(x).__module__.startswith("torch") and hasattr(x, "grad_fn"):
        if namespace is None:  # the caller's names: a notebook's globals, a function's locals
            caller = sys._getframe(1)
            namespace = {**caller.f_globals, **caller.f_locals}
        doc = _tensor_trace(x, namespace)
    else:
        raise TypeError(f"show() takes a tensor, a Trace document (dict), or a stored run's id "
                        f"or URL, not {type(x).__name__}")
    return TraceDisplay(doc, event=event, layout=layout, link=link, draw=draw, whole=whole)


def _tensor_trace(x, namespace: dict) -> dict:
    """A Trace whose one view is `make_dot(x)`, recorded by the tracer as a script's make_dot
    call is, in a copy of `namespace` (the same objects, so its modules name the parameters)."""
    import torchviz

    from app.trace.in_namespace import trace_source

    if x.grad_fn is None:
        raise ValueError("this tensor has no grad_fn, so it has no graph to show: compute it "
                         "from a tensor that requires grad (a module's parameters, or "
                         "torch.randn(..., requires_grad=True))")
    ns = dict(namespace)
    ns.update(_autograd_lab_torchviz=torchviz, _autograd_lab_root=x)
    # make_dot looked up while the tracer runs: the recording one, which keeps it as a view
    return trace_source("_autograd_lab_torchviz.make_dot(_autograd_lab_root)", ns, name="show")


def _server_and_id(ref: str, server: str | None) -> tuple[str, str]:
    ref = ref.strip()
    if ref.startswith(("http://", "https://")):
        url = urllib.parse.urlsplit(ref)
        match = _RUN_PATH.match(url.path)
        if not match:
            raise ValueError(f"{ref!r} is not a run's address: expected …/runs/ID or "
                             "…/api/runs/ID, as the run page's address bar shows it")
        return f"{url.scheme}://{url.netloc}{match['prefix']}", match["id"]
    if not _RUN_ID.fullmatch(ref):
        raise ValueError(f"{ref!r} is neither a run id (letters, digits, - and _) nor a run's "
                         "URL")
    server = server or os.environ.get(SERVER_ENV)
    if not server:
        raise ValueError(f"to show run {ref!r}, say which server keeps it: "
                         f"show({ref!r}, server='http://127.0.0.1:8000') or set {SERVER_ENV}")
    if not server.startswith(("http://", "https://")):
        raise ValueError(f"the server {server!r} must be an http:// or https:// address")
    return server.rstrip("/"), ref


def fetch_run(ref: str, server: str | None = None, timeout: float = 60.0) -> tuple[dict, str]:
    """A stored run's Trace from `GET {server}/api/runs/{id}`, and the run page's URL."""
    base, run_id = _server_and_id(ref, server)
    url = f"{base}/api/runs/{urllib.parse.quote(run_id)}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            body = answer.read(MAX_RUN_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(4096).decode("utf-8", "replace")
        try:
            detail = json.loads(detail).get("detail", detail)
        except (ValueError, AttributeError):
            pass
        raise ValueError(f"{url} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ValueError(f"could not reach the autograd-lab server at {base} ({exc}); is it "
                         "running, and is the address right?") from None
    if len(body) > MAX_RUN_BYTES:
        raise ValueError(f"{url} sent more than {MAX_RUN_BYTES // 2**20} MB: not a Trace")
    try:
        doc = json.loads(body)
    except ValueError:
        raise ValueError(f"{url} did not answer with JSON: is {base} an autograd-lab server?") \
            from None
    try:
        validate(doc)  # a server is someone else's: its document is checked like a worker's
    except InvalidTrace as exc:
        raise ValueError(f"{url} answered JSON that is not a Trace document ({exc})") from None
    return doc, f"{base}/runs/{urllib.parse.quote(run_id)}"
