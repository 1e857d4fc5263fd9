"""Anomaly mode's forward stack, taken only from the traced code inwards.

With anomaly mode on, torch stores the formatted Python stack on every node it makes
(`torch.fx.traceback.format_stack`, read and source-line-looked-up frame by frame). Whatever
called the tracer is in that stack too: a few frames in the worker, but about 25 in a Jupyter
kernel (ipykernel, tornado, asyncio, IPython's run_cell, the magic), each looked up in linecache
for each of the first few hundred nodes. A 6-layer encoder's step spent 0.65 s of its 1.7 s
there in a kernel. Those frames are never the script's (a report scrubs autograd-lab's own,
and a kernel's are not the cell's), so the stack stops where the traced run starts: the same
per-node cost in a kernel as in the worker. Each frame's text is formatted once per run (the
same few dozen lines make every node's stack), not looked up again for each node; a recursion's
repeated frames are all listed, not folded as Python's own traceback folds them.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator
from types import FrameType

import torch.fx.traceback as fx_traceback

__all__ = ["stack_from"]


@contextlib.contextmanager
def stack_from(outer: FrameType) -> Iterator[None]:
    """While inside, anomaly mode's stacks hold the frames inside `outer` (the traced run's
    own frame, itself left out). torch's C++ looks `format_stack` up on its module for every
    node, so replacing the module's attribute is what it calls."""
    original = fx_traceback.format_stack
    said: dict[tuple[str, int, str], str] = {}  # a frame's two lines, formatted once per run

    def entry(code, lineno: int) -> str:
        key = (code.co_filename, lineno, code.co_name)
        text = said.get(key)
        if text is None:
            # traceback.format_list's own text for one frame
            text = traceback.format_list([traceback.FrameSummary(*key)])[0]
            said[key] = text
        return text

    def format_stack() -> list[str]:
        if fx_traceback.should_preserve_node_meta:  # torch's own replay of a graph: as it was
            return original()
        entries = []
        frame = sys._getframe(1)
        while frame is not None and frame is not outer:
            entries.append(entry(frame.f_code, frame.f_lineno))
            frame = frame.f_back
        if frame is None:  # another thread's op, or a call from outside the run: all of it
            return traceback.format_list(traceback.extract_stack(sys._getframe(1)))
        entries.reverse()  # outermost first, as traceback.format_stack gives them
        return entries

    fx_traceback.format_stack = format_stack
    try:
        yield
    finally:
        fx_traceback.format_stack = original
