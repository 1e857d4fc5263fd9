"""The `%%autograd_lab` cell magic: the cell run in the kernel's namespace under the tracer."""

from __future__ import annotations

import argparse
import shlex
import sys

from .display import DRAWERS, LAYOUTS, TraceDisplay
from .failure import CellFailure

__all__ = ["parse_line", "run_cell", "cell_map"]

USAGE = ("%%autograd_lab [--event N] [--layout flat|modules] [--draw kernel|browser] "
         "[--name NAME] [--whole]")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit the kernel's process
        raise ValueError(f"{message}. Usage: {USAGE}")


def parse_line(line: str) -> argparse.Namespace:
    parser = _Parser(prog="%%autograd_lab", add_help=False)
    parser.add_argument("--event", type=int, default=None,
                        help="the backward event to draw (its index in the Trace's events)")
    parser.add_argument("--layout", choices=LAYOUTS, default=None,
                        help="flat, or by module (default: flat when small, as the page)")
    parser.add_argument("--draw", choices=DRAWERS, default=None,
                        help="who lays the graph out: the kernel's graphviz (default where it "
                        "has `dot`) or the browser's (graphviz compiled to WebAssembly)")
    parser.add_argument("--name", default="cell", help="the Trace's script name")
    parser.add_argument("--whole", action="store_true",
                        help="store the whole Trace in the output (by default it keeps the pass "
                        "drawn, without tensors' values: autograd_lab/stored.py)")
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ValueError(f"could not read the magic's options ({exc}). Usage: {USAGE}") from None
    return parser.parse_args(words)


def run_cell(line: str, cell: str, namespace: dict, *, above: str = "%%autograd_lab",
             number: int | None = None, notebook: str | None = None,
             cells: dict[str, int] | None = None) -> TraceDisplay:
    """Trace the cell in `namespace`. `above`: the cell's lines above `cell` (its magic line),
    so that its lines are counted as the person sees them; `number`: the cell's execution count,
    its lines then said "cell N, line M"; `cells`: the kernel's other cells by the file each was
    compiled under -> execution count, so that code written there says its own "cell N, line M"
    (trace_source). What the cell prints is shown as it prints it (less anomaly mode's forward
    traceback, kept in the Trace); when it ends, a failure is said (failure.py), then the
    graph."""
    from IPython.display import display

    from app.trace.in_namespace import trace_source

    options = parse_line(line)
    doc = trace_source(cell, namespace, name=options.name, above=above, anomaly_reports=[],
                       cells=cells, echo=True)
    if number is not None and number >= 1:
        doc["script"]["notebook"] = cell_map(doc["script"]["source"], number, notebook)
    if doc["error"]:
        sys.stdout.flush()  # the prints before the failure stay above its explanation
        sys.stderr.flush()
        display(CellFailure(doc))
    return TraceDisplay(doc, event=options.event, layout=options.layout, draw=options.draw,
                        failure_shown=bool(doc["error"]), whole=options.whole)


def cell_map(source: str, number: int, notebook: str | None) -> dict:
    """The Trace's `script.notebook` for one cell (app/format/notebook.py's shape): all its
    lines are cell `number`'s, the magic's line 1 included."""
    from app.format import clip
    from app.format.notebook import lines_of

    return {"name": clip(notebook or "notebook", 200), "skipped": [], "skipped_count": 0,
            "cells": [{"cell": number, "first": 1, "last": max(1, len(lines_of(source)))}]}
