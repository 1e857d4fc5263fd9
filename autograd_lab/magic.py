"""The `%%autograd_lab` cell magic: the cell run in the kernel's namespace under the tracer."""

from __future__ import annotations

import argparse
import shlex
import sys

from .display import DRAWERS, LAYOUTS, TraceDisplay

__all__ = ["parse_line", "run_cell"]

USAGE = ("%%autograd_lab [--event N] [--layout flat|modules] [--draw kernel|browser] "
         "[--name NAME]")


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
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ValueError(f"could not read the magic's options ({exc}). Usage: {USAGE}") from None
    return parser.parse_args(words)


def run_cell(line: str, cell: str, namespace: dict) -> TraceDisplay:
    """Trace the cell in `namespace`; what it printed goes to the cell's output when it ends."""
    from app.trace.in_namespace import trace_source

    options = parse_line(line)
    doc = trace_source(cell, namespace, name=options.name)
    if doc["stdout"]:
        sys.stdout.write(doc["stdout"])
    if doc["stderr"]:
        sys.stderr.write(doc["stderr"])
    return TraceDisplay(doc, event=options.event, layout=options.layout, draw=options.draw)
