"""Trace code in a namespace that already exists (a Jupyter kernel's), not a script run as
`__main__` from a file: the same recorder and the same document as `trace_script`.

No sandbox: this runs the caller's own code in the caller's own process, with everything that
process may do. It is for a person's own notebook on their own machine (the `autograd_lab`
package's cell magic); code from anyone else goes through the runner's sandboxed worker.

One difference from a script: when the code calls no backward, nothing runs one for it. A
script's run ends with it, so autograd-lab may run backward from its chosen root; in a kernel
that pass would add to the gradients of the person's own model.
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable

import torch

from app.format import Trace, new_document
from app.format.notebook import lines_of

from .recorder import RecordingLimits
from .tracer import run_traced

__all__ = ["trace_source", "trace_call"]

_cells = itertools.count(1)


def trace_source(source: str, namespace: dict, *, name: str = "cell", device: str = "cpu",
                 limits: RecordingLimits | None = None, above: str = "",
                 anomaly_reports: list[str] | None = None,
                 cells: dict[str, int] | None = None, echo: bool = False) -> Trace:
    """Run `source` in `namespace` (its names stay there afterwards, as a cell's do) under the
    recorder, and return its Trace. Lines are the source's own; what it prints is in the
    Trace's `stdout`, not printed. Not sandboxed (see above).

    `above`: the lines a person sees above the code, which do not run (a cell magic's
    `%%autograd_lab` line): the code's lines are numbered after them, as in the cell, and the
    Trace's source is the whole cell. `anomaly_reports`, `echo` (prints shown as they are
    printed too): see run_traced. `cells`: a notebook's other cells, by the file name each was
    compiled under -> its execution count (IPython's `compile._filename_map`): a node made by
    code written there says that cell's line too."""
    if not isinstance(source, str):
        raise TypeError(f"source must be a str of Python code, not {type(source).__name__}")
    if not isinstance(namespace, dict):
        raise TypeError("namespace must be a dict (a kernel's user_ns, a module's __dict__), "
                        f"not {type(namespace).__name__}")
    # a file name of its own per call, kept in linecache as IPython keeps its cells', so that
    # frames, error lines and a node's line all point into this source
    filename = f"<autograd-lab {name} {next(_cells)}>"
    shown = f"{above.rstrip(chr(10))}\n{source}" if above else source
    # blank lines in place of those above: compiled, the code's lines are the cell's
    compiled = "\n" * len(lines_of(above)) + source
    linecache.cache[filename] = (len(shown), None, shown.splitlines(keepends=True), filename)
    doc = new_document(name, shown, device, torch.__version__)

    def run() -> None:
        # dont_inherit: the code is compiled as Python would, not under this module's own
        # `from __future__` flags
        code = compile(compiled, filename, "exec", dont_inherit=True)
        exec(code, namespace)  # noqa: S102 - the person's own code

    return run_traced(doc, compiled, filename, lambda: (namespace, run), device=device,
                      limits=limits, chosen_root=False, anomaly_reports=anomaly_reports,
                      cell_files={k: v for k, v in (cells or {}).items()
                                  if isinstance(k, str) and isinstance(v, int) and v >= 1},
                      load_matplotlib=False, show_figures=True, echo=echo,
                      forward_memory=False)


def trace_call(fn: Callable[[], object], *, name: str | None = None, device: str = "cpu",
               limits: RecordingLimits | None = None) -> Trace:
    """Call `fn()` under the recorder and return the Trace. The file that defines `fn` (a
    notebook cell, a module) is the document's source, so lines are that file's. Not
    sandboxed (see above)."""
    if not callable(fn):
        raise TypeError(f"expected a function to call with no arguments, not "
                        f"{type(fn).__name__}; to trace code given as text use trace_source")
    code = getattr(fn, "__code__", None)  # else (a partial, a callable object): no lines
    filename = code.co_filename if code is not None else f"<autograd-lab call {next(_cells)}>"
    source = "".join(linecache.getlines(filename))
    namespace = getattr(fn, "__globals__", None)
    namespace = namespace if isinstance(namespace, dict) else {}
    label = name or getattr(fn, "__qualname__", None) or type(fn).__name__
    doc = new_document(label, source, device, torch.__version__)
    return run_traced(doc, source, filename, lambda: (namespace, fn), device=device,
                      limits=limits, chosen_root=False, load_matplotlib=False,
                      show_figures=True, forward_memory=False)
