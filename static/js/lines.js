// Where a line of the run's script is, in the words the person knows it by: "line 7" for a
// script, "cell 3, line 2" for an uploaded notebook, whose Trace maps the lines of the script
// it ran to its cells (script.notebook, app/format/notebook.py). The one place on the page
// where a line number becomes words; a button still selects the script's own line.

let cells = [];

/** The run now shown: a notebook's cell map, or none for a script (or no run). */
export function setScript(script) {
  const nb = script && script.notebook;
  cells = nb && Array.isArray(nb.cells) ? nb.cells : [];
}

/** [cell, line in the cell] of a script line; null for a script or outside every cell. The
 * cells are in script order, so the search halves: a big graph asks once per node. */
export function cellLine(line) {
  let lo = 0, hi = cells.length - 1, at = -1;
  while (lo <= hi) {  // the last cell that starts at or before the line
    const mid = (lo + hi) >> 1;
    if (cells[mid].first <= line) { at = mid; lo = mid + 1; } else hi = mid - 1;
  }
  const c = at >= 0 && line <= cells[at].last ? cells[at] : null;
  return c ? [c.cell, line - c.first + 1] : null;
}

/** "line 7", or "cell 3, line 2" in a notebook. */
export function lineLabel(line) {
  const at = cellLine(line);
  return at ? `cell ${at[0]}, line ${at[1]}` : `line ${line}`;
}

/** Where a node was made: "cell 1, line 5" when its op is written in another notebook cell
 * than the one traced (a model's forward defined earlier: its `cell_line`), else its line's
 * label; null when it has neither. */
export function nodeLineLabel(node) {
  const at = node && node.cell_line;
  if (at && Number.isInteger(at.cell) && Number.isInteger(at.line)) return `cell ${at.cell}, line ${at.line}`;
  return node && node.line ? lineLabel(node.line) : null;
}

/** The script line that "cell C, line M" names; null if the notebook has no such line. */
export function scriptLine(cell, at) {
  const c = cells.find((x) => x.cell === cell);
  return c && at >= 1 && c.first + at - 1 <= c.last ? c.first + at - 1 : null;
}
