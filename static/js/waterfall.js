// The gradient accumulation chart: one bar per use, each starting where the previous one ended
// (a waterfall), so the last use ends exactly at the sum, drawn against .grad below it.
// A bar is one number per tensor (the sum of its entries, or one entry): those add up exactly,
// which norms would not. Negative bars are hatched, so direction is not told by hue alone.

import { s, fmt, signed } from "./dom.js";

const ROW = 50;
const LEFT = 8;
const WIDTH = 440;
const ROOM = 74; // space on each side of the bars for the value labels

/**
 * rows: [{kind: "before"|"use"|"hook"|"total", label, value, node?}]
 * hooks: {onHover(nodeId|null), onPick(nodeId)}
 * `scale`: its type and rows larger than the panel's (presenter mode: the room reads them), the
 * bars narrower to make room for the numbers.
 */
export function waterfall(rows, { onHover = () => {}, onPick = () => {}, scale = 1 } = {}) {
  const k = scale;
  const row = ROW * k;
  const room = ROOM * k;
  let cum = 0;
  const spans = rows.map((row) => {
    if (row.kind === "total") return [0, row.value];
    const from = cum;
    cum += row.value;
    return [from, cum];
  });
  const points = [0, ...spans.flat()].filter(Number.isFinite);
  let lo = Math.min(...points);
  let hi = Math.max(...points);
  if (hi - lo < 1e-30) { lo -= 1; hi += 1; }
  const pad = (hi - lo) * 0.04;
  lo -= pad; hi += pad;
  const barW = WIDTH - 2 * room;
  // a NaN or infinite value (a NaN that reached .grad) has no place on the axis: drawn at 0,
  // its label says what it is
  const x = (v) => room + (((Number.isFinite(v) ? v : 0) - lo) / (hi - lo)) * barW;
  const height = rows.length * row + 14 * k;

  const svg = s("svg", { class: "waterfall", viewBox: `0 0 ${WIDTH} ${height}`, role: "group",
    "aria-label": "Gradient accumulation: one bar per use, then .grad", style: k === 1 ? null : `--wf: ${k}` },
  s("defs", {}, s("pattern", { id: "acc-hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)" }, s("rect", { width: 6, height: 6, fill: "#cfe3f3" }),
  s("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#0072B2", "stroke-width": 3 }))));

  // the zero axis beside each row's bar only: a row's label, on the line above its bar, is
  // never crossed by it
  rows.forEach((_, i) => svg.append(s("line", { class: "zero-axis", x1: x(0), x2: x(0), y1: i * row + 23 * k, y2: i * row + 49 * k })));
  rows.forEach((entry, i) => {
    const [a, b] = spans[i];
    const top = i * row + 4 * k;
    const x0 = Math.min(x(a), x(b));
    const w = Math.max(Math.abs(x(b) - x(a)), 1.5);
    const cls = `acc-bar ${entry.kind}${entry.value < 0 ? " negative" : ""}`;
    const shown = entry.kind === "total" ? fmt(entry.value, 5) : signed(entry.value, 5);
    // its name says what is drawn, words and value as seen (a button named otherwise is not
    // the one a speech-input user asks for by what they read)
    const g = s("g", { class: cls, tabindex: entry.node ? 0 : null, role: entry.node ? "button" : null,
      dataset: { value: String(entry.value), node: entry.node || "", kind: entry.kind },
      "aria-label": `${entry.label}: ${shown}` });
    // the lines first: the label (with its white halo, app.css) is drawn over them
    if (i > 0 && entry.kind !== "total") {
      // dashed connector: this bar starts where the previous one ended
      g.append(s("line", { class: "connector", x1: x(a), x2: x(a), y1: top - 9 * k, y2: top + 21 * k }));
    }
    if (entry.kind === "total") {
      g.append(s("line", { class: "sum-line", x1: x(spans[i - 1] ? spans[i - 1][1] : 0),
        x2: x(spans[i - 1] ? spans[i - 1][1] : 0), y1: top - 9 * k, y2: top + 45 * k }));
    }
    // the row's label on a line of its own, so it never runs into a bar or a value
    g.append(
      s("text", { class: "acc-label", x: LEFT, y: top + 15 * k, text: entry.label }),
      s("rect", { x: x0, y: top + 21 * k, width: w, height: 20 * k, rx: 2 }),
      s("text", { class: "acc-value", x: entry.value < 0 ? x0 - 4 * k : x0 + w + 4 * k, y: top + 31 * k,
        "text-anchor": entry.value < 0 ? "end" : "start", "dominant-baseline": "middle", text: shown }),
    );
    if (entry.node) {
      g.addEventListener("mouseenter", () => onHover(entry.node));
      g.addEventListener("mouseleave", () => onHover(null));
      g.addEventListener("focus", () => onHover(entry.node));
      g.addEventListener("blur", () => onHover(null));
      g.addEventListener("click", () => onPick(entry.node));
      g.addEventListener("keydown", (e) => { if (e.key === "Enter") onPick(entry.node); });
    }
    svg.append(g);
  });
  // keep value labels inside the drawing even for bars that end at the edge
  svg.style.overflow = "visible";
  return svg;
}
