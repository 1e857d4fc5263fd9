"""A Jupyter notebook as one script, and the map back from the script's lines to its cells.

A notebook runs as its code cells would in a fresh kernel, top to bottom: they are joined, in
order, into one script (one namespace), one script line per cell line and nothing between
cells, so script line L is line L - first + 1 of the cell whose lines cover it. Markdown and
raw cells, every output kept in the file, cells' attachments and all metadata are ignored: they
are dropped before nbformat reads the rest, so only the code counts against the script's size
(`MAX_NOTEBOOK_BYTES` bounds the file as saved).

Cells are numbered by their place among all the notebook's cells, markdown included, counting
from 1: the number a person finds by counting down the notebook (Jupyter's execution counts
say in which order cells last ran, not where they are).

IPython-only lines cannot run as Python; they are skipped and named in the run's notes:
- line magics (`%time f()`), shell lines (`!pip install x`), help (`?x`, `x?`, `x??`), and
  assignments from them (`files = !ls`); with a trailing backslash, the lines it continues too.
  Only at the start of a statement: a `!` inside a multi-line string or bracket is Python's.
  Each becomes `pass` at its own indentation, so a block it was the body of stays a block;
- cell magics: `%%time`, `%%timeit`, `%%capture`, `%%prun` and `%%autograd_lab` (our own
  extension's, which traces its cell: here the whole notebook is traced) wrap Python, so only
  their first line is skipped and the body runs once, its lines the cell's own; any other
  (`%%bash`, `%%writefile`, `%%html`, ...) is not Python, and its whole cell is skipped (as
  blank lines, so lines stay aligned).

Pure: no torch, no web. nbformat, imported when a notebook is read, reads and validates it.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from .build import clip, diagnostic
from .schema import deeper_than

__all__ = ["MAX_NOTEBOOK_BYTES", "notebook_bound", "NotANotebook", "Notebook", "SKIPPED_CODE",
           "annotate", "cell_line", "lines_of", "listing_rows", "looks_like_notebook",
           "script_from_notebook", "skipped_note", "where"]

SKIPPED_CODE = "ipython_lines_skipped"  # the run's diagnostic that names the skipped lines
MAX_NOTED = 100  # skipped lines kept in the document; the note says how many more
MAX_DIAGNOSTICS = 5000  # the schema's bound on a Trace's diagnostics
MAX_TEXT = 200  # of a skipped line, as kept
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "autograd_lab"})
# a notebook as saved, outputs included (its code alone is held to the script's limit): the
# course notebooks seen were 76-187 KB with their outputs, a few MB with many figures
MAX_NOTEBOOK_BYTES = 4 * 1024 * 1024
# deeper than any notebook Jupyter writes (its outputs and widget state are a few levels):
# nbformat's reading and schema check recurse, and give up a few hundred levels down
MAX_DEPTH = 100

_WHAT_TO_DO = ("save it again from Jupyter (File → Save), or upload its code as a .py script")
_HELP = re.compile(r"\?\??[\w.]*|[\w.]+\?\??")
# a timed statement runs once, as itself: %time STMT, %timeit [-n N -r R -q -o ...] STMT
_TIMED = re.compile(r"%time\s+(?P<stmt>\S.*)|"
                    r"%timeit\s+(?:-[nrp]\s*\d+\s+|-[tcqo]\s+)*(?P<stmt2>\S.*)")
_MAGIC = re.compile(r"\s*%%autograd_lab\b(?P<options>.*)")  # our extension's cell magic
_ASSIGNED = re.compile(r"[A-Za-z_][\w., ]*=\s*[!%]")
# the line breaks of Python and of Jupyter: str.splitlines() also breaks at \x0c, \x1c-\x1e,
# \x85, U+2028 and U+2029, which Python reads as part of a line (a string may hold them)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class NotANotebook(ValueError):
    """The upload cannot be read as a notebook; the message says why and what to do."""


@dataclass(frozen=True)
class Notebook:
    """A notebook as the script that runs it.

    `cells`: one {"cell", "first", "last"} per code cell with lines (`cell` its place among all
    cells, from 1; `first`..`last` the script lines it occupies). `skipped`: one {"cell",
    "line", "text"} per IPython-only line (cell line, from 1), with "lines" when the skip
    covered more than that line (a cell magic's whole cell, a continued line)."""
    source: str
    cells: list[dict[str, int]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def document_part(self, name: str) -> dict[str, Any]:
        """The Trace's `script.notebook`: the file's name, the cell map, the skipped lines."""
        return {"name": name, "cells": self.cells, "skipped": self.skipped[:MAX_NOTED],
                "skipped_count": len(self.skipped)}


def notebook_bound(script_cap: int) -> int:
    """How large a notebook may be as saved where a script may be `script_cap` bytes: never
    less than a script (a server that takes bigger scripts takes notebooks that big too)."""
    return max(script_cap, MAX_NOTEBOOK_BYTES)


def looks_like_notebook(text: str) -> bool:
    """Whether `text` is a JSON object with "cells" and "nbformat" (a notebook, whatever its
    file name): Python source is never that."""
    if not text.lstrip().startswith("{"):
        return False
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "nbformat" in data and (
        "cells" in data or "worksheets" in data)  # "worksheets": nbformat 3, converted


def script_from_notebook(data: bytes | str) -> Notebook:
    """The notebook's code cells as one script, with their map (NotANotebook if it is not
    JSON, not a notebook, does not follow nbformat's schema, or has no code)."""
    text = _text(data)
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotANotebook(f"the notebook is not valid JSON ({_short(exc)}): the file may be "
                           f"cut short or not a notebook; {_WHAT_TO_DO}") from None
    if not isinstance(raw, dict) or "nbformat" not in raw or not (
            "cells" in raw or "worksheets" in raw):
        raise NotANotebook('this JSON is not a Jupyter notebook (a notebook is an object with '
                           f'"cells" and "nbformat"); {_WHAT_TO_DO}')
    if deeper_than(raw, MAX_DEPTH):
        raise NotANotebook(f"the notebook's JSON is nested more than {MAX_DEPTH} levels deep "
                           "(in its metadata or outputs: code cells are text), which Jupyter "
                           "never writes; clear its outputs (Jupyter: Edit → Clear Outputs of "
                           "All Cells) and any metadata a tool added, save it and upload it "
                           "again, or upload its code as a .py script")
    nb = _read(json.dumps(_without_outputs(raw)))
    cells, skipped, lines = [], [], []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.get("cell_type") != "code":
            continue
        body, skips = _python_lines(str(cell.get("source") or ""))
        skipped += [{"cell": number, **s} for s in skips]
        if body:
            cells.append({"cell": number, "first": len(lines) + 1,
                          "last": len(lines) + len(body)})
            lines += body
    if not any(line.strip() and line.strip() != "pass" for line in lines):
        raise NotANotebook("the notebook has no Python code to run: none of its cells is a "
                           "code cell with Python in it (IPython-only lines are skipped)")
    return Notebook("\n".join(lines) + "\n", cells, skipped)


def lines_of(text: str) -> list[str]:
    """`text`'s lines as Python and Jupyter count them (only \\n, \\r\\n and \\r end one);
    like str.splitlines(), no empty line after a final line break."""
    lines = _LINE_BREAK.split(text)
    return lines[:-1] if lines[-1] == "" else lines


def cell_line(cells: list[dict[str, int]], line: int) -> tuple[int, int] | None:
    """(cell, line in the cell) of a script line, or None outside every cell. `cells` are in
    script order (as Notebook.cells are), so the search halves: a drawing asks once a node."""
    at = bisect_right(cells, line, key=lambda c: c["first"]) - 1
    if at >= 0 and line <= cells[at]["last"]:
        c = cells[at]
        return c["cell"], line - c["first"] + 1
    return None


def where(cells: list[dict[str, int]] | None, line: int) -> str:
    """"cell 3, line 2" for a notebook's script line; "line N" for a script's."""
    found = cell_line(cells, line) if cells else None
    return f"cell {found[0]}, line {found[1]}" if found else f"line {line}"


def listing_rows(part: dict, source: str) -> list[dict[str, Any]]:
    """For the source listing, one row per script line: its cell and line in the cell, whether
    a cell starts there, and the IPython-only text shown in place of a skipped line."""
    skipped = {(s["cell"], s["line"]): s["text"] for s in part["skipped"]}
    count = len(lines_of(source))
    rows: list[dict[str, Any]] = [{"cell": 0, "at": n, "head": False, "skipped": None}
                                  for n in range(1, count + 1)]
    for c in part["cells"]:
        for n in range(c["first"], min(c["last"], count) + 1):
            at = n - c["first"] + 1
            rows[n - 1] = {"cell": c["cell"], "at": at, "head": at == 1,
                           "skipped": skipped.get((c["cell"], at))}
    return rows


def annotate(doc: dict, part: dict | None) -> None:
    """Give a run's document its notebook (`script.notebook`, and the note naming the skipped
    lines), or take away one it should not have: the server's word, not the worker's."""
    script = doc.get("script")
    if not isinstance(script, dict):
        return
    script.pop("notebook", None)
    if part is None:
        return
    script["notebook"] = part
    note = skipped_note(part)
    diagnostics = doc.setdefault("diagnostics", [])
    if note and isinstance(diagnostics, list) and len(diagnostics) < MAX_DIAGNOSTICS:
        diagnostics.insert(0, note)  # first: it is about what ran at all


def skipped_note(part: dict) -> dict | None:
    """The run's diagnostic naming the IPython-only lines that did not run (None if none)."""
    skipped, count = part["skipped"], part["skipped_count"]
    if not count:
        return None
    said = []
    for s in skipped[:20]:
        more = (f" (the whole cell, {s['lines']} lines)" if s.get("lines")
                and s["text"].lstrip().startswith("%%") else
                _traced_cell(s["text"]) if _MAGIC.match(s["text"]) else
                " (what it wraps ran, once, without the magic)" if s.get("ran") else "")
        text = s["text"].strip()
        text = text if len(text) <= 80 else text[:77] + "..."
        said.append(f"cell {s['cell']}, line {s['line']} `{text}`{more}")
    rest = count - len(said)
    return diagnostic(SKIPPED_CODE, "info",
                      f"IPython-only line{'s' if count > 1 else ''} skipped (they are "
                      "not Python, so they did not run): " + "; ".join(said) +
                      (f"; and {rest} more" if rest else "") + ". A package a `!pip` line "
                      "installs must already be on the server.")


def _traced_cell(text: str) -> str:
    """What a `%%autograd_lab` line's note adds: its body ran; its options did nothing here."""
    options = _MAGIC.match(text)["options"].strip()
    return (" (its body ran, once, traced with the rest of the notebook; its options, `"
            f"{clip(options, 60)}`, choose what Jupyter draws and are not used here: the run's "
            "page shows every backward event)" if options else
            " (its body ran, once, traced with the rest of the notebook)")


def _text(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NotANotebook(f"the notebook is not UTF-8 text; {_WHAT_TO_DO}") from None


def _without_outputs(raw: dict) -> dict:
    """The notebook with what never runs dropped: outputs, execution counts, attachments and
    metadata (a widget's state, a tool's notes), in nbformat 4's cells or 3's worksheets."""
    def code_only(cell: Any) -> Any:
        if not isinstance(cell, dict):
            return cell  # nbformat says what is wrong with it
        cell = {k: v for k, v in cell.items() if k != "attachments"}
        if "metadata" in cell:
            cell["metadata"] = {}
        if "outputs" in cell:
            cell["outputs"] = []
        for count in ("execution_count", "prompt_number"):
            if count in cell:
                cell[count] = None
        return cell

    out = {**raw, "metadata": {}} if "metadata" in raw else dict(raw)
    if isinstance(raw.get("cells"), list):
        out["cells"] = [code_only(c) for c in raw["cells"]]
    if isinstance(raw.get("worksheets"), list):
        out["worksheets"] = [{**w, "cells": [code_only(c) for c in w["cells"]]}
                             if isinstance(w, dict) and isinstance(w.get("cells"), list) else w
                             for w in raw["worksheets"]]
    return out


def _read(text: str):
    import nbformat  # here: only the web layer reads notebooks, never the worker
    from jsonschema import ValidationError

    try:
        nb = nbformat.reads(text, as_version=4, capture_validation_error={})
        nbformat.validate(nb)
    except ValidationError as exc:
        path = list(exc.absolute_path)
        problem = _short(exc.message)
        if exc.validator in ("oneOf", "anyOf") and path[:1] == ["cells"] and len(path) == 2:
            problem = "it is not a code, markdown or raw cell as nbformat defines them"
        place = " ".join(f"cell {p + 1}" if isinstance(p, int) and n and path[n - 1] == "cells"
                         else str(p) for n, p in enumerate(path) if p != "cells")
        raise NotANotebook("the notebook does not follow the notebook format"
                           f"{f' at {place}' if place else ''}: {problem}; "
                           f"{_WHAT_TO_DO}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # nbformat's own errors
        raise NotANotebook(f"nbformat cannot read this notebook: {_short(exc)}; "
                           f"{_WHAT_TO_DO}") from None
    except RecursionError:  # MAX_DEPTH is meant to keep this from happening
        raise NotANotebook("the notebook is nested too deeply for nbformat to read; clear its "
                           "outputs (Jupyter: Edit → Clear Outputs of All Cells), save it and "
                           "upload it again, or upload its code as a .py script") from None
    return nb


def _short(exc: object) -> str:
    return clip(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 200)


def _python_lines(source: str) -> tuple[list[str], list[dict[str, Any]]]:
    """A cell's lines with its IPython-only ones made `pass` (or blank), and what was skipped."""
    lines = lines_of(source)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].lstrip()[2:].split(maxsplit=1)
        if not magic or magic[0] not in PYTHON_CELL_MAGICS:  # not Python: the whole cell
            return ([""] * len(lines), [{"line": first + 1, "text": clip(lines[first], MAX_TEXT),
                                         "lines": len(lines) - first}])
        skipped = [{"line": first + 1, "text": clip(lines[first], MAX_TEXT), "ran": True}]
        lines = [*lines[:first], "pass", *lines[first + 1:]]
        body, more = _line_magics(lines, skip={first})
        return body, skipped + more
    return _line_magics(lines)


def _line_magics(lines: list[str], skip: frozenset[int] | set[int] = frozenset()
                 ) -> tuple[list[str], list[dict[str, Any]]]:
    out, skipped = list(lines), []
    scan = _Scanner()
    i = 0
    while i < len(lines):
        line = lines[i]
        if i not in skip and scan.at_statement_start() and _ipython_only(line):
            indent = line[:len(line) - len(line.lstrip())]
            timed = _timed(line)
            out[i] = f"{indent}{timed or 'pass'}"
            end = i
            while lines[end].rstrip().endswith("\\") and end + 1 < len(lines):
                end += 1
                out[end] = ""  # continues the skipped line: skipped with it
            entry: dict[str, Any] = {"line": i + 1, "text": clip(line, MAX_TEXT)}
            if end > i:
                entry["lines"] = end - i + 1
            if timed:
                entry["ran"] = True  # its statement ran, once, without the magic
                scan.feed(out[i])
            skipped.append(entry)
            i = end + 1
            continue
        scan.feed(line)
        i += 1
    return out, skipped


def _timed(line: str) -> str | None:
    """The statement of `%time STMT` or `%timeit ... STMT` (one line), else None."""
    found = _TIMED.fullmatch(line.strip())
    if not found or line.rstrip().endswith("\\"):
        return None
    return found["stmt"] or found["stmt2"]


def _ipython_only(line: str) -> bool:
    text = line.strip()
    if not text or text.startswith("#"):
        return False
    return (text[0] in "%!" or bool(_HELP.fullmatch(text))
            or bool(_ASSIGNED.match(text)))


class _Scanner:
    """Just enough of Python's tokenizer to say whether a line starts a statement: not inside
    a string, brackets, or a backslash continuation."""

    def __init__(self) -> None:
        self.depth = 0            # open brackets
        self.quote: str | None = None  # the open string's quote (''' or " ...)
        self.continued = False    # the last line ended with a backslash

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        self.continued = False
        while i < n:
            ch = line[i]
            if self.quote is not None:
                if ch == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                i += 1
                continue
            if ch == "#":
                break
            if ch in "\"'":
                triple = line[i:i + 3]
                self.quote = triple if triple in ('"""', "'''") else ch
                i += len(self.quote)
                continue
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            elif ch == "\\" and i == n - 1:
                self.continued = True
            i += 1
        if self.quote is not None and len(self.quote) == 1:
            if not line.endswith("\\"):
                self.quote = None  # a one-line string ends with its line (or is an error)
            else:
                self.continued = False
