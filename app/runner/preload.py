"""Which of the worker's optional preloads a script needs, read from its source. Torch-free.
matplotlib is one; the optimizer warm-up (`needs_warm_up`) another.

A worker loads what a script may use before the sandbox closes (worker.py `prepare`). matplotlib
is one of them, and the dearest one that a plain run of a script without it never pays: about
0.6 s of CPU (pyplot, its font list rebuilt in the run's own folder, a first drawing), a fixed
cost of every traced run (issue 36). A fresh worker started for one known script loads it only
when the script may import it; a pool's pre-started workers and the fork server, which start
before any script is known, still load everything.

"May import it" errs towards loading: any import of a module that is not the standard
library's, torch's or numpy's (a helper module, seaborn, pandas), the word "matplotlib" or
"pylab" anywhere in the text (an `importlib` call, a notebook's `%matplotlib`), or a source that
does not parse. A script missed all the same imports matplotlib itself, inside the sandbox
(its font cache and settings go to the run's folder, MPLCONFIGDIR), and its figures are kept as
a plain import's are: the capture is set up the moment pyplot is imported, however it is
(app/trace/on_import.py; checked through the sandbox: `importlib.import_module('matp' +
'lotlib.pyplot')` keeps the same PNG as a preloaded `import matplotlib.pyplot`). Only the
0.6 s is then paid inside the run, as a plain run pays it.
"""

from __future__ import annotations

import ast
import sys

__all__ = ["needs_plotting", "needs_warm_up"]

# top-level modules known not to import matplotlib, nor step an optimizer, when imported
_KNOWN = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "tqdm", "torchviz", "__future__"}


def needs_plotting(source: str) -> bool:
    """Whether a worker for `source` should load matplotlib before its sandbox closes."""
    return _may_use(source, ("matplotlib", "pylab"))


def needs_warm_up(source: str) -> bool:
    """Whether a worker for `source` should step each common optimizer once before its sandbox
    closes (worker.py `_warm_up`): the first step imports torch._dynamo, about 1 s of CPU that
    a plain run of a script without an optimizer never pays. Any "optim" or "compile" in the
    text (torch.optim, an lr_scheduler, torch.compile), and the same unknown imports as for
    matplotlib. A script missed (`getattr(torch, 'op' + 'tim')`, a torch.load, a checkpoint)
    imports dynamo inside its run, as a plain run does: checked through the sandbox, an Adam
    and a torch.compile run so print what plain Python prints, with the events, diagnostics
    and parameters a warmed worker records."""
    return _may_use(source, ("optim", "compile", "_dynamo"))


def _may_use(source: str, words: tuple[str, ...]) -> bool:
    if any(word in source for word in words):
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import: a package of the script's own
                return True
            names = [node.module or ""]
        else:
            continue
        if any(name.partition(".")[0] not in _KNOWN for name in names):
            return True
    return False
