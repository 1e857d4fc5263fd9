"""Python source as numbered, lightly highlighted lines for the scenario page.

Uses the standard library's tokenizer, so no highlighter is shipped to the browser. The point is
to make comments (where scenarios explain the lines that matter), strings and keywords stand out
on a projector, nothing more; a file that does not tokenize is shown plain.
"""

from __future__ import annotations

import io
import keyword
import tokenize

from markupsafe import Markup, escape

from app.format.notebook import lines_of

__all__ = ["source_lines"]

_CLASSES = {tokenize.COMMENT: "tok-comment", tokenize.STRING: "tok-string",
            tokenize.NUMBER: "tok-number"}


def _spans(source: str) -> list[tuple[int, int, int, int, str]]:
    spans = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        css = _CLASSES.get(tok.type)
        if tok.type == tokenize.NAME and keyword.iskeyword(tok.string):
            css = "tok-keyword"
        if css:
            spans.append((*tok.start, *tok.end, css))
    return spans


def source_lines(source: str) -> list[Markup]:
    """One HTML string per line of `source` (1-based line n is item n-1), its lines counted as
    Python counts them: the traced line numbers and a notebook's cell map name these."""
    lines = lines_of(source)
    try:
        spans = _spans("".join(line + "\n" for line in lines))  # a lone \r ends a line too
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return [Markup(escape(line)) for line in lines]
    # per line: (start col, end col, class); a multi-line string is split at line ends
    marks: dict[int, list[tuple[int, int, str]]] = {}
    for row, col, end_row, end_col, css in spans:
        for r in range(row, end_row + 1):
            start = col if r == row else 0
            stop = end_col if r == end_row else len(lines[r - 1]) if r <= len(lines) else 0
            marks.setdefault(r, []).append((start, stop, css))
    out = []
    for n, line in enumerate(lines, start=1):
        html, pos = [], 0
        for start, stop, css in sorted(marks.get(n, [])):
            if start < pos:
                continue
            html.append(str(escape(line[pos:start])))
            html.append(f'<span class="{css}">{escape(line[start:stop])}</span>')
            pos = stop
        html.append(str(escape(line[pos:])))
        out.append(Markup("".join(html)))
    return out
