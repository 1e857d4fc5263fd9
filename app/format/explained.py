"""An explained failure (a Trace's `error.explanation`, app/trace/failures.py) as text: what
happened, where, the fix as changed lines, and the scenario that teaches it. One wording for
the terminal (`autograd-lab trace`) and a notebook's output (the `autograd_lab` package); the
run page says the same in static/js/status.js.

A notebook's lines are said as its cells' ("cell 3, line 2", app/format/notebook.py), in the
sentences too: the tracer writes "line N" of the script it ran.
"""

from __future__ import annotations

import re

from .notebook import where

__all__ = ["say_lines", "explained_lines"]

_LINE = re.compile(r"\b(?:cell \d+, )?([Ll])ine (\d+)")


def say_lines(text: str, cells: list[dict] | None) -> str:
    """`text` with each "line N" of the script said as `where` says it (a notebook's "cell C,
    line M"; a script's lines stay as they are). A "cell C, line M" already said is kept."""
    if not cells:
        return text

    def said(m: re.Match) -> str:
        if m.group(0).startswith("cell"):
            return m.group(0)
        w = where(cells, int(m.group(2)))
        return w[0].upper() + w[1:] if m.group(1) == "L" else w

    return _LINE.sub(said, text)


def explained_lines(ex: dict, cells: list[dict] | None = None) -> list[str]:
    """An explanation as lines of text: what happened, where, the fix (a diff of the lines it
    changes) and the scenario; lines said as `say_lines` says them."""
    out = [f"What happened [{ex['code']}]: {say_lines(ex['what'], cells)}"]
    if ex.get("line"):
        out.append(f"Where: {where(cells, ex['line'])}")
    fix = ex.get("fix")
    if fix:
        out.append(f"Suggested change: {say_lines(fix['say'], cells)}")
        for e in fix["edits"]:
            out.append(f"  {where(cells, e['line'])}:")
            out.append(f"  - {e['before']}")
            out += [f"  + {line}" for line in e["after"].split("\n")]
    if ex.get("scenario"):
        out.append(f"The scenario that shows it: autograd-lab trace {ex['scenario']}  (or "
                   f"/scenarios/{ex['scenario']} in the app)")
    return out
