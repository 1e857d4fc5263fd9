// Heat maps of small tensors on a canvas. One diverging scale centred on zero, shared by the maps
// shown side by side so that their colours compare. Blue for negative and orange for positive
// (Okabe-Ito hues, distinguishable with the common colour-vision deficiencies); negative cells
// also carry a dash and exact zeros a dot, so sign and zero read in greyscale too.

import { h, fmt, num } from "./dom.js";

const NEG = [0, 114, 178];
const POS = [213, 94, 0];

/** Nested values -> {rows, cols, data (flat numbers)}; tensors of rank > 2 as shape[0] x rest. */
export function matrix(summary) {
  if (!summary || summary.values === undefined) return null;
  const shape = summary.shape || [];
  const data = [summary.values].flat(Infinity).map(num);
  if (shape.length === 0) return { rows: 1, cols: 1, data };
  if (shape.length === 1) return { rows: 1, cols: shape[0], data };
  return { rows: shape[0], cols: data.length / Math.max(shape[0], 1), data };
}

export function maxAbs(...summaries) {
  let m = 0;
  for (const sm of summaries) {
    const mat = matrix(sm);
    for (const v of mat ? mat.data : []) if (Number.isFinite(v)) m = Math.max(m, Math.abs(v));
  }
  return m;
}

export function colour(v, scale) {
  if (!Number.isFinite(v)) return "rgb(0,0,0)";
  const t = scale > 0 ? Math.min(1, Math.abs(v) / scale) : 0;
  const [r, g, b] = v < 0 ? NEG : POS;
  const mix = (c) => Math.round(255 + (c - 255) * t);
  return `rgb(${mix(r)},${mix(g)},${mix(b)})`;
}

/** Index of a cell in the tensor's own shape (what the permalink and the labels show). */
export function cellIndex(summary, row, col) {
  const shape = summary.shape || [];
  if (shape.length <= 1) return shape.length === 0 ? [] : [col];
  const flat = row * (shape.slice(1).reduce((a, b) => a * b, 1)) + col;
  const index = [];
  let rest = flat;
  for (let d = shape.length - 1; d >= 0; d--) {
    index.unshift(rest % shape[d]);
    rest = Math.floor(rest / shape[d]);
  }
  return index;
}

/** The value at a tensor index (as from cellIndex). */
export function valueAt(summary, index) {
  let v = summary && summary.values;
  if (v === undefined) return null;
  for (const i of index) {
    if (!Array.isArray(v) || i >= v.length) return null;
    v = v[i];
  }
  return Array.isArray(v) ? null : num(v);
}

/** One number per tensor that adds up across uses: the sum of all entries, or one entry. */
export function measure(summary, cell) {
  if (!summary) return 0;
  if (cell) return valueAt(summary, cell) ?? NaN;
  const mat = matrix(summary);
  if (mat) return mat.data.reduce((a, b) => a + b, 0);
  return num(summary.mean) * (summary.numel ?? 1);
}

/** A summary carries its values up to this many elements (app/trace/summary.py MAX_VALUES),
 *  while the run's budget of numbers lasts. */
export const MAX_VALUES = 4096;

/**
 * A figure with a caption and a canvas. `onCell(index)` is called with the tensor index of a
 * clicked cell; `picked` is the index to outline.
 */
export function heatmap(summary, { title, scale, picked = null, onCell = null, maxWidth = 260 }) {
  const mat = matrix(summary);
  const figure = h("figure.heatmap", {});
  if (!mat) {
    const why = summary && summary.numel <= MAX_VALUES ? "values not kept (the run's budget)" : "too large to draw";
    figure.append(h("figcaption", {}, title), h("p.hint", {}, summary ?
      `${why} (${summary.numel} values): min ${fmt(summary.min)}, max ${fmt(summary.max)}` :
      "no tensor (None)"));
    return figure;
  }
  const cell = Math.max(4, Math.min(30, Math.floor(maxWidth / mat.cols)));
  const width = cell * mat.cols;
  const height = Math.max(cell * mat.rows, 4);
  const canvas = h("canvas", { width: width * devicePixelRatio, height: height * devicePixelRatio,
    style: `width:${width}px;height:${height}px`, role: "img",
    "aria-label": `${title}: heat map of ${mat.rows} by ${mat.cols} values, min ${fmt(summary.min)}, max ${fmt(summary.max)}` });
  const ctx = canvas.getContext("2d");
  ctx.scale(devicePixelRatio, devicePixelRatio);
  for (let r = 0; r < mat.rows; r++) {
    for (let c = 0; c < mat.cols; c++) {
      const v = mat.data[r * mat.cols + c];
      ctx.fillStyle = colour(v, scale);
      ctx.fillRect(c * cell, r * cell, cell, cell);
      if (cell >= 10) mark(ctx, v, c * cell, r * cell, cell, scale);
    }
  }
  if (cell >= 8) {
    ctx.strokeStyle = "rgba(0,0,0,0.15)";
    ctx.lineWidth = 1;
    for (let r = 0; r <= mat.rows; r++) line(ctx, 0, r * cell, width, r * cell);
    for (let c = 0; c <= mat.cols; c++) line(ctx, c * cell, 0, c * cell, height);
  }
  if (picked) {
    const flat = flatIndex(summary, picked);
    if (flat !== null) {
      const r = Math.floor(flat / mat.cols);
      const c = flat % mat.cols;
      ctx.strokeStyle = "#000";
      ctx.lineWidth = 3;
      ctx.strokeRect(c * cell + 1.5, r * cell + 1.5, cell - 3, cell - 3);
    }
  }
  const at = (e) => {
    const box = canvas.getBoundingClientRect();
    const c = Math.floor((e.clientX - box.left) / cell);
    const r = Math.floor((e.clientY - box.top) / cell);
    return r >= 0 && c >= 0 && r < mat.rows && c < mat.cols ? [r, c] : null;
  };
  canvas.addEventListener("mousemove", (e) => {
    const rc = at(e);
    if (!rc) return;
    const index = cellIndex(summary, ...rc);
    canvas.title = `[${index.join(", ")}] = ${fmt(mat.data[rc[0] * mat.cols + rc[1]], 6)}`;
  });
  if (onCell) {
    canvas.classList.add("clickable");
    canvas.addEventListener("click", (e) => {
      const rc = at(e);
      if (rc) onCell(cellIndex(summary, ...rc));
    });
  }
  figure.append(h("figcaption", {}, title), canvas,
    h("div.heatmap-stats", {}, `min ${fmt(summary.min)} · max ${fmt(summary.max)} · ‖·‖ ${fmt(summary.norm)}`));
  return figure;
}

/** The colour scale as a labelled bar: −scale … 0 … +scale. */
export function colourBar(scale) {
  const canvas = h("canvas", { width: 160, height: 12, class: "colour-bar", "aria-hidden": "true" });
  const ctx = canvas.getContext("2d");
  for (let x = 0; x < 160; x++) {
    ctx.fillStyle = colour(((x + 0.5) / 160 * 2 - 1) * scale, scale);
    ctx.fillRect(x, 0, 1, 12);
  }
  return h("div.colour-scale", {}, h("span", {}, `−${fmt(scale, 3)}`), canvas, h("span", {}, `+${fmt(scale, 3)}`),
    h("span.hint", {}, " blue = negative (with a dash), orange = positive, dot = exactly 0"));
}

function flatIndex(summary, index) {
  const shape = summary.shape || [];
  if (index.length !== shape.length) return null;
  let flat = 0;
  for (let d = 0; d < shape.length; d++) flat = flat * shape[d] + index[d];
  return flat;
}

function mark(ctx, v, x, y, cell, scale) {
  // white marks on the darkest cells, black elsewhere, so the mark is always visible
  ctx.fillStyle = scale > 0 && Math.abs(v) / scale > 0.6 ? "#fff" : "#000";
  if (v === 0) {
    ctx.beginPath();
    ctx.arc(x + cell / 2, y + cell / 2, Math.max(1.5, cell / 10), 0, 2 * Math.PI);
    ctx.fill();
  } else if (v < 0) {
    ctx.fillRect(x + cell * 0.3, y + cell / 2 - 1, cell * 0.4, 2);
  }
}

function line(ctx, x1, y1, x2, y2) {
  ctx.beginPath();
  ctx.moveTo(x1 + 0.5, y1 + 0.5);
  ctx.lineTo(x2 + 0.5, y2 + 0.5);
  ctx.stroke();
}
