"""The child process the runner starts: trace one script, write the Trace document to a file.

    python -m app.trace.worker --script PATH --out OUT.json [--device D] [--name N] [-- ARGS]

The document is written to a temporary name and renamed, so the runner never reads half a file.
A SIGTERM (the runner's wall-clock limit) interrupts the script where it is; the document then
says which line it had reached.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path


def _on_term(signum, frame):
    from .execute import TimeLimitExceeded

    raise TimeLimitExceeded(
        "the script ran past its time limit and was stopped; the line shown is where it was "
        "(look for an endless loop, a long sleep or too many iterations)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.trace.worker")
    parser.add_argument("--script", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--name")
    parser.add_argument("--max-events", type=int, default=10)
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)

    from .recorder import Limits
    from .run import trace_script

    limits = Limits(max_backward_events=args.max_events, max_step_events=args.max_events)
    doc = trace_script(Path(args.script), name=args.name, argv=args.script_args,
                       device=args.device, limits=limits)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, allow_nan=False, separators=(",", ":"))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
