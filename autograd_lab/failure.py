"""A traced cell that failed: its first output says what failed and where, and, for a failure
autograd-lab knows (app/trace/failures.py), what happened and the change that fixes it, before
anything the cell printed and before its graph. Lines are the cell's as the person sees it
("cell 5, line 3": the `%%autograd_lab` line is line 1), said through app/format's notebook map.

No traceback of ipykernel's, runpy's or autograd-lab's own frames: only the cell's, and anomaly
mode's forward traceback stays in the Trace (its stderr), where the node it names is marked.
"""

from __future__ import annotations

import html
import re

from app.format.explained import explained_lines, say_lines
from app.format.notebook import where

__all__ = ["CellFailure", "cells_of"]


def cells_of(doc: dict) -> list[dict] | None:
    """The notebook's cell map of a Trace (script.notebook.cells), or None for a script's."""
    notebook = (doc.get("script") or {}).get("notebook")
    return notebook.get("cells") if isinstance(notebook, dict) else None


def _rich(text: str) -> str:
    """Escaped, with `code` as <code> (the tracer writes code that way)."""
    return re.sub(r"`([^`<>]+)`", r"<code>\1</code>", html.escape(text))


class CellFailure:
    """What IPython shows first for a failed traced cell (`_repr_mimebundle_`): plain text,
    and HTML for JupyterLab, GitHub and nbviewer."""

    def __init__(self, doc: dict) -> None:
        self.doc = doc

    def headline(self) -> str:
        err, cells = self.doc["error"], cells_of(self.doc)
        at = f" at {where(cells, err['line'])}" if err.get("line") else ""
        return f"The cell stopped with {err['type']}{at}"

    def _explanation(self) -> dict | None:
        ex = self.doc["error"].get("explanation")
        return ex if ex and ex.get("code") != "unrecognised" else None

    def _frames(self) -> list[str]:
        """The cell's own frames, outermost first, when there is more than the failing line."""
        frames = self.doc["error"].get("frames") or []
        if len(frames) < 2:
            return []
        cells = cells_of(self.doc)
        return [f"… {f['omitted']} more frame(s)" if "omitted" in f else
                f"{where(cells, f['line'])}, in {f['function']}: {f.get('code', '')}" +
                (f" (and {f['repeated']} more time(s))" if f.get("repeated") else "")
                for f in frames]

    def _backtrace_kept(self) -> str:
        """What became of the backtrace torch's message points to (anomaly mode's), if any."""
        if "Traceback of forward call" not in (self.doc.get("stderr") or ""):
            return ""
        return (" (the backtrace it points to, anomaly mode's, is kept in the Trace's stderr "
                "rather than printed: the graph marks the node it names)")

    def text(self) -> str:
        err, cells = self.doc["error"], cells_of(self.doc)
        message = say_lines(err["message"], cells)
        ex = self._explanation()
        lines = [f"autograd-lab: {self.headline()}: {message}" if not ex else
                 f"autograd-lab: {self.headline()}."]
        if ex:
            lines += explained_lines(ex, cells)
            lines.append(f"PyTorch's message ({err['type']}): {message}"
                         f"{self._backtrace_kept()}")
        if frames := self._frames():
            lines += ["The cell's frames, outermost first:", *(f"  {f}" for f in frames)]
        return "\n".join(lines)

    def html(self) -> str:
        # every string here may be the person's own (their code, their exception's message)
        err, cells = self.doc["error"], cells_of(self.doc)
        e = html.escape
        message = e(say_lines(err["message"], cells))
        ex = self._explanation()
        parts = ['<div class="autograd-lab-failure" style="border-left:4px solid #b3261e;'
                 'padding:0.3em 0.8em">']
        if not ex:
            parts.append(f"<p><strong>{e(self.headline())}</strong>: {message}</p>")
        else:
            parts.append(f"<p><strong>{e(self.headline())}.</strong></p>")
            parts.append(f"<p><strong>What happened:</strong> "
                         f"{_rich(say_lines(ex['what'], cells))}</p>")
            if ex.get("line"):
                parts.append(f"<p><strong>Where:</strong> {e(where(cells, ex['line']))}</p>")
            fix = ex.get("fix")
            if fix:
                parts.append(f"<p><strong>Suggested change:</strong> "
                             f"{_rich(say_lines(fix['say'], cells))}</p>")
                if fix["edits"]:
                    diff = "\n".join(
                        f"{where(cells, x['line'])}\n- {x['before']}\n" +
                        "\n".join(f"+ {line}" for line in x["after"].split("\n"))
                        for x in fix["edits"])
                    parts.append(f'<pre class="autograd-lab-fix">{e(diff)}</pre>')
            if ex.get("scenario"):
                parts.append(f"<p>The scenario that shows it: <code>autograd-lab trace "
                             f"{e(ex['scenario'])}</code></p>")
            parts.append(f"<details><summary>PyTorch's message ({e(err['type'])})</summary>"
                         f"<p>{message}{e(self._backtrace_kept())}</p></details>")
        if frames := self._frames():
            parts.append("<details><summary>The cell's frames, outermost first</summary><pre>"
                         f"{e(chr(10).join(frames))}</pre></details>")
        parts.append("</div>")
        return "".join(parts)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": self.text(), "text/html": self.html()}
