"""autograd-lab inside Jupyter: `%load_ext autograd_lab`, then `%%autograd_lab` on a cell,
`autograd_lab.show(x)` and `autograd_lab.trace(fn_or_code)`.

The code runs in the kernel itself, recorded by autograd-lab's own tracer (app/trace), with no
sandbox: it is your code on your machine, with everything your kernel may do. (The server runs
uploaded code in a sandboxed worker; nothing here does.) Needs the `notebook` extra for IPython.
"""

from __future__ import annotations

from .api import fetch_run, show, trace
from .display import TRACE_MIMETYPE, TraceDisplay

__all__ = ["load_ipython_extension", "show", "trace", "fetch_run", "TraceDisplay",
           "TRACE_MIMETYPE"]


def load_ipython_extension(ip) -> None:
    """`%load_ext autograd_lab`: registers the `%%autograd_lab` cell magic."""
    from IPython.display import display

    from .magic import run_cell

    def autograd_lab(line: str, cell: str) -> None:
        # IPython's own syntax in the cell (`!ls`, `%time`) becomes Python, as in any cell
        display(run_cell(line, ip.transform_cell(cell), ip.user_ns))

    autograd_lab.__doc__ = (
        "%%autograd_lab [--event N] [--layout flat|modules] [--name NAME]\n\n"
        "Run the cell in this kernel's namespace under autograd-lab's tracer (no sandbox: "
        "your own code) and show its backward graph; the output also holds the Trace as "
        "application/vnd.autograd-lab.trace+json.")
    ip.register_magic_function(autograd_lab, magic_kind="cell", magic_name="autograd_lab")
