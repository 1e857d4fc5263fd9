// Gradient flow: each module's gradient norm (or mean |grad|) against depth, one line per
// backward pass, the pass on show drawn bold; and one parameter's norm across the passes. The
// numbers are the server's (GET .../gradient-flow, app/format/flow.py); this only draws them,
// on a log scale, as an SVG that can be saved as SVG or PNG.

import { fill, h, s } from "./dom.js";

const W = 640;
const H = 250;
const M = { left: 58, right: 12, top: 14, bottom: 64 };

function logRange(values) {
  // a loop, not Math.min(...values): a forged report's 400,000 values overflow the call stack
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (typeof v !== "number" || !(v > 0) || !Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (min === Infinity) return null;
  let lo = Math.floor(Math.log10(min));
  let hi = Math.ceil(Math.log10(max));
  if (hi === lo) { lo -= 1; hi += 1; }
  return [lo, hi];
}

function axes(range, labels, title) {
  const [lo, hi] = range;
  const x = (i) => M.left + (labels.length < 2 ? (W - M.left - M.right) / 2 : i * (W - M.left - M.right) / (labels.length - 1));
  const y = (v) => M.top + (hi - Math.log10(v)) * (H - M.top - M.bottom) / (hi - lo);
  const parts = [s("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" })];
  const step = Math.max(1, Math.ceil((hi - lo) / 6));
  for (let p = lo; p <= hi; p += step) {
    parts.push(s("line", { x1: M.left, x2: W - M.right, y1: y(10 ** p), y2: y(10 ** p), stroke: "#ddd" }),
      s("text", { x: M.left - 6, y: y(10 ** p) + 4, "text-anchor": "end", "font-size": 11, text: `1e${p}` }));
  }
  const every = Math.max(1, Math.ceil(labels.length / 24));
  labels.forEach((label, i) => {
    if (i % every) return;
    const short = label.length > 18 ? `…${label.slice(-17)}` : label;
    parts.push(s("text", { x: x(i), y: H - M.bottom + 12, "font-size": 10, "text-anchor": "end",
      transform: `rotate(-40 ${x(i)} ${H - M.bottom + 12})`, text: short }));
  });
  parts.push(s("text", { x: 12, y: M.top + (H - M.top - M.bottom) / 2, "font-size": 11, "text-anchor": "middle",
    transform: `rotate(-90 12 ${M.top + (H - M.top - M.bottom) / 2})`, text: title }));
  return { x, y, parts };
}

function line(points, attrs) {
  const d = points.filter(Boolean).map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join(" ");
  return d ? s("path", { d, fill: "none", ...attrs }) : null;
}

/** The chart of modules against depth for every pass; `current` (an event index) in bold. */
function depthChart(flow, measure, current) {
  const labels = flow.modules.map((m) => m.module);
  const range = logRange(flow.events.flatMap((e) => e[measure]));
  if (!range) return null;
  const { x, y, parts } = axes(range, labels, measure === "norm" ? "‖grad‖ of the module" : "mean |grad|");
  for (const e of flow.events) {
    const bold = e.event === current;
    const points = e[measure].map((v, i) => (typeof v === "number" && v > 0 ? [x(i), y(v)] : null));
    parts.push(line(points, { stroke: bold ? "#0072B2" : "#b9c3cc", "stroke-width": bold ? 2.5 : 1.2, class: bold ? "flow-current" : "flow-other" }));
    if (bold) {
      e[measure].forEach((v, i) => {
        if (typeof v === "number" && v > 0) {
          parts.push(s("circle", { cx: x(i), cy: y(v), r: 3.2, fill: "#0072B2", class: "flow-point" },
            s("title", { text: `${labels[i]}: ${v.toExponential(2)}` })));
        }
      });
    }
  }
  return s("svg", { xmlns: "http://www.w3.org/2000/svg", viewBox: `0 0 ${W} ${H}`, width: W, height: H,
    class: "flow-chart", role: "img", "aria-label": `Gradient ${measure} of each module against depth` }, parts);
}

/** One parameter's norm after each pass. */
function paramChart(flow, name) {
  const p = Object.hasOwn(flow.params, name) ? flow.params[name] : null;
  if (!p) return null;
  const labels = flow.events.map((e) => `#${e.event}`);
  const range = logRange(p.norm);
  if (!range) return null;
  const { x, y, parts } = axes(range, labels, `‖${name}.grad‖`);
  parts.push(line(p.norm.map((v, i) => (typeof v === "number" && v > 0 ? [x(i), y(v)] : null)), { stroke: "#D55E00", "stroke-width": 2 }));
  p.norm.forEach((v, i) => {
    if (typeof v === "number" && v > 0) parts.push(s("circle", { cx: x(i), cy: y(v), r: 3.2, fill: "#D55E00" }, s("title", { text: `after backward ${labels[i]}: ${v.toExponential(2)}` })));
  });
  return s("svg", { xmlns: "http://www.w3.org/2000/svg", viewBox: `0 0 ${W} ${H}`, width: W, height: H,
    class: "flow-chart flow-param", role: "img", "aria-label": `Norm of ${name}.grad after each backward pass` }, parts);
}

function save(blob, file) {
  const a = h("a", { href: URL.createObjectURL(blob), download: file });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

function svgBlob(svg) {
  return new Blob([new XMLSerializer().serializeToString(svg)], { type: "image/svg+xml" });
}

function savePng(svg, file) {
  const img = new Image();
  const url = URL.createObjectURL(svgBlob(svg));
  img.onload = () => {
    const canvas = h("canvas", { width: W * 2, height: H * 2 });
    const ctx = canvas.getContext("2d");
    ctx.scale(2, 2);
    ctx.drawImage(img, 0, 0, W, H);
    URL.revokeObjectURL(url);
    canvas.toBlob((blob) => save(blob, file), "image/png");
  };
  img.src = url;
}

/** Fill the gradient-flow section. `state`: {measure, event, param}; `jsonUrl` for export. */
export function renderFlow(section, flow, state, { jsonUrl, onMeasure, name = "gradient-flow" }) {
  const body = section.querySelector(".flow-body");
  const usable = Boolean(flow && flow.modules.length >= 2 && flow.events.length);
  section.hidden = !usable;
  if (!usable) fill(body);
  if (!usable) return;
  const chart = depthChart(flow, state.measure, state.event);
  const param = state.param ? paramChart(flow, state.param) : null;
  const buttons = (svg, base) => svg ? h("p.flow-export", {},
    "Save: ",
    h("button.link", { type: "button", onclick: () => save(svgBlob(svg), `${base}.svg`) }, "SVG"), " · ",
    h("button.link", { type: "button", onclick: () => savePng(svg, `${base}.png`) }, "PNG"), " · ",
    h("a", { href: jsonUrl, download: `${name}.json` }, "JSON")) : null;
  fill(body,
    h("p.flow-measures", {},
      ...["norm", "abs_mean"].map((m) => h("button", { type: "button", "aria-pressed": String(state.measure === m),
        onclick: () => onMeasure(m) }, m === "norm" ? "‖grad‖ per module" : "mean |grad| per module"))),
    chart || h("p.hint", {}, "No module received a gradient in these passes."),
    buttons(chart, name),
    param ? [h("h3", {}, `${state.param}: ‖grad‖ after each backward pass`), param, buttons(param, `${name}-${state.param}`)] : null);
}
