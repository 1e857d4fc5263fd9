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
        above, number = _this_cell(ip, line, cell)
        display(run_cell(line, ip.transform_cell(cell), ip.user_ns, above=above, number=number,
                         notebook=_notebook_name(ip), cells=_cell_files(ip)))

    autograd_lab.__doc__ = (
        "%%autograd_lab [--event N] [--layout flat|modules] [--draw kernel|browser] "
        "[--name NAME] [--whole]\n\n"
        "Run the cell in this kernel's namespace under autograd-lab's tracer (no sandbox: "
        "your own code) and show its backward graph; the output also holds the Trace as "
        "application/vnd.autograd-lab.trace+json (the pass drawn, without tensors' values; "
        "--whole keeps all).")
    ip.register_magic_function(autograd_lab, magic_kind="cell", magic_name="autograd_lab")


def _this_cell(ip, line: str, cell: str) -> tuple[str, int | None]:
    """The cell's lines above its body as the person typed them (the `%%autograd_lab` line,
    and blank lines before it, which IPython drops before calling the magic), and its number
    as the front end shows it ("[5]"). From IPython's history, which holds the raw cell at its
    execution count when that is this cell; else the magic's line alone and no number."""
    magic = f"%%autograd_lab {line}".rstrip()
    try:
        history = ip.history_manager.input_hist_raw
        raw = history[-1]
    except (AttributeError, IndexError, TypeError):
        return magic, None
    lines = str(raw).split("\n")
    at = next((i for i, text in enumerate(lines) if text.strip()), None)
    if at is None or not lines[at].lstrip().startswith("%%autograd_lab") or \
            "\n".join(lines[at + 1:]).rstrip() != cell.rstrip():
        return magic, None
    return "\n".join(lines[:at + 1]), len(history) - 1


def _cell_files(ip) -> dict[str, int]:
    """The file name IPython compiled each earlier cell under -> its execution count, as its
    tracebacks say "Cell In[3]" (IPython's CachingCompiler keeps the map); empty where the
    shell has none."""
    found = getattr(getattr(ip, "compile", None), "_filename_map", None)
    return dict(found) if isinstance(found, dict) else {}


def _notebook_name(ip) -> str | None:
    """The notebook's path, where the front end told the kernel (JupyterLab sets
    `__session__`); None elsewhere."""
    session = ip.user_ns.get("__session__")
    return session.rsplit("/", 1)[-1] if isinstance(session, str) and session else None
