// The bytes a pass held for backward, per module, as bars (the Trace's saved_memory.by_module:
// each allocation once per module whose nodes saved it, so a module's bar counts its own nodes,
// not its submodules'). On the compare page every variant's bars share one scale.

import { bytesText, h, s } from "./dom.js";

export const MAX_BARS = 12;

/** A list of the modules that held the most, each with a bar; null when none held a byte.
 *  `scale`: the bytes a full bar stands for (default: this pass's largest module). */
export function moduleBars(memory, scale = 0) {
  const rows = Object.entries(memory.by_module).filter(([, b]) => b > 0)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  if (!rows.length) return null;
  const top = rows.slice(0, MAX_BARS);
  const max = scale || top[0][1];
  return h("ul.saved-by-module", { "aria-label": "bytes held for backward, by module" },
    top.map(([name, b]) => h("li", { dataset: { module: name, bytes: String(b) } },
      h("code", {}, name), ` ${bytesText(b)}`,
      // an SVG attribute, not a style: the width is the bar's only number
      s("svg.mem-bar", { width: "100%", height: "8", "aria-hidden": "true" },
        s("rect", { x: "0", y: "0", height: "8", width: `${(100 * b / max).toFixed(2)}%` })))),
    rows.length > MAX_BARS ? h("li.more", {}, `and ${rows.length - MAX_BARS} more module${rows.length - MAX_BARS === 1 ? "" : "s"}`) : "");
}

/** Redraw every bar under `root` on one scale: the largest module of all of them. */
export function shareScale(root) {
  const rows = [...root.querySelectorAll(".saved-by-module li[data-bytes]")];
  const max = Math.max(1, ...rows.map((li) => Number(li.dataset.bytes)));
  for (const li of rows) {
    li.querySelector("rect").setAttribute("width", `${(100 * Number(li.dataset.bytes) / max).toFixed(2)}%`);
  }
}
