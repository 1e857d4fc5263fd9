// The page's keyboard: ← → step the replay (Home/End while replaying), Esc clears, + − 0 zoom.
// Keys typed into a form control stay with it (← → move between variant buttons there), and
// the arrows pressed on a node of the graph walk the graph (graph_keys.js) instead.

export function installKeys({ replaying, step, toStep, toEnd, clear, zoomIn, zoomOut, fit, ready }) {
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.target.closest("input, select, textarea, [contenteditable]")) return;
    const on = replaying();
    const keys = {
      ArrowRight: () => toStep(on ? step() + 1 : 1),
      ArrowLeft: () => toStep(on ? step() - 1 : 0),
      Home: on ? () => toStep(0) : null,
      End: on ? toEnd : null,
      Escape: clear,
      "+": zoomIn,
      "=": zoomIn,
      "-": zoomOut,
      0: fit,
    };
    const action = keys[e.key];
    if (!action || !ready()) return;
    e.preventDefault();
    action();
  });
}
