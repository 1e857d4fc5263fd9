"""Python's cyclic garbage collector leaves the objects that existed before a traced run alone
while it runs.

A traced step makes some 14,000 container objects of its own (its graph's nodes and edges, the
summaries) and they live until the step's Trace is made: the collector's young generations
hand them on to the oldest, and every few steps a full collection follows, over everything the
process holds. With torch imported that is 330,000 objects, more in a Jupyter kernel: about
0.2 s each time, 30 ms a step on average for a 6-layer encoder whose plain step takes 70 ms.

`gc.freeze()` moves the objects already there out of the collector's sight (a list splice,
not a walk) and `gc.unfreeze()` puts them back into the oldest generation afterwards; what
the run itself makes is collected as usual. A `gc.collect()` of the code's own (`del model;
gc.collect()` in a notebook, to free memory now) puts them back first, so it frees what it
would have freed. A process that froze objects itself, or turned the collector off, is left
as it is: the sandboxed worker freezes what it loaded once, for good (runner/worker.py), and
this is the same for a Jupyter kernel, whose process is the person's own, for the run alone.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator

__all__ = ["older_objects_frozen"]


@contextlib.contextmanager
def older_objects_frozen() -> Iterator[None]:
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    original = gc.collect
    frozen = [True]

    @functools.wraps(original)
    def collect(*args, **kwargs):
        if frozen[0]:
            frozen[0] = False
            gc.unfreeze()
        return original(*args, **kwargs)

    gc.freeze()
    gc.collect = collect
    try:
        yield
    finally:
        gc.collect = original
        if frozen[0]:
            gc.unfreeze()
