"""`autograd_lab` as a script in the worker finds it, so that a notebook written for the Jupyter
extension (`import autograd_lab`, `autograd_lab.show(x)`, `autograd_lab.trace(f)`) runs in the
sandbox too.

There the whole script is traced already, so nothing here traces: `trace` runs its function or
code plainly, and `show(tensor)` calls `torchviz.make_dot`, which the tracer records as one of
the run's views (views.py). What has no meaning in the sandbox (a Trace to return, a stored run
to fetch from a server) is said on the script's stdout. The worker registers this module as
`autograd_lab` before it confines itself (worker.py `prepare`); the real package, whose `show`
fetches runs over the network, is never imported there.
"""

from __future__ import annotations

import sys

__all__ = ["show", "trace", "fetch_run", "load_ipython_extension", "TRACE_MIMETYPE", "NOTE"]

TRACE_MIMETYPE = "application/vnd.autograd-lab.trace+json"
NOTE = ("autograd_lab: here, in the server's sandbox, the whole notebook is traced, so "
        "autograd_lab.trace() and show() run their code plainly (trace() returns None) and "
        "their graphs are among the run's own on its page.")
_said: list[str] = []


def _say(text: str) -> None:
    """Each sentence once per run, on the script's own stdout."""
    if text not in _said:
        _said.append(text)
        print(text, flush=True)


def trace(fn_or_code, namespace: dict | None = None, *, name: str | None = None) -> None:
    """Call a function with no arguments, or run code given as text in `namespace` (by default
    the caller's globals), as the kernel's `trace` does, but without a Trace of its own."""
    _say(NOTE)
    if isinstance(fn_or_code, str):
        ns = namespace if namespace is not None else sys._getframe(1).f_globals
        exec(compile(fn_or_code, "<autograd_lab.trace>", "exec"), ns)  # noqa: S102 - the script's own
        return None
    if callable(fn_or_code):
        fn_or_code()
        return None
    raise TypeError(f"trace() takes a function to call with no arguments or code as a str, "
                    f"not {type(fn_or_code).__name__}")


def show(x, *, event: int | None = None, layout: str | None = None, server: str | None = None,
         namespace: dict | None = None, draw: str | None = None) -> None:
    """A tensor's graph as a view of the run (torchviz's make_dot, recorded by the tracer);
    a Trace or a stored run has nothing to show here, which is said."""
    _say(NOTE)
    import torch

    if isinstance(x, torch.Tensor):
        if x.grad_fn is None:
            raise ValueError("this tensor has no grad_fn, so it has no graph to show: compute it "
                             "from a tensor that requires grad (a module's parameters, or "
                             "torch.randn(..., requires_grad=True))")
        try:
            import torchviz
        except ImportError:
            _say("autograd_lab.show(tensor): torchviz is not installed on this server, so there "
                 "is no picture of the tensor's own graph; the run's backward passes are on "
                 "its page.")
            return None
        torchviz.make_dot(x)  # looked up now: the tracer's recording make_dot
        return None
    if x is None or isinstance(x, dict):
        _say("autograd_lab.show(a Trace): there is no Trace of its own here (trace() returns "
             "None); the run's page shows the whole notebook's.")
        return None
    if isinstance(x, str):
        _say(f"autograd_lab.show({x[:80]!r}): a stored run is fetched from a server, which the "
             "sandbox cannot reach; open that run's page instead.")
        return None
    raise TypeError(f"show() takes a tensor, a Trace document (dict), or a stored run's id "
                    f"or URL, not {type(x).__name__}")


def fetch_run(ref: str, server: str | None = None, timeout: float = 60.0):
    """Refused: the sandbox reaches no server."""
    raise RuntimeError(f"autograd_lab.fetch_run({ref!r}) fetches a stored run from a server, "
                       "which the server's sandbox cannot reach; open that run's page instead")


def load_ipython_extension(ip) -> None:
    """Nothing to register: the sandbox runs no IPython (`%load_ext` lines are skipped)."""
