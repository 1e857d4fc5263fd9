// Small DOM and number helpers shared by the page's modules. Text always goes in through
// textContent, never innerHTML, because trace documents carry strings from user scripts.

import { lineLabel, scriptLine } from "./lines.js";

const SVG_NS = "http://www.w3.org/2000/svg";

/** h("div.cls#id", {attr: v, onclick: fn}, child, "text", [more]) -> HTMLElement */
export function h(tag, attrs = {}, ...children) {
  return build(document.createElement(parseTag(tag).name), tag, attrs, children);
}

/** The same for SVG elements. */
export function s(tag, attrs = {}, ...children) {
  return build(document.createElementNS(SVG_NS, parseTag(tag).name), tag, attrs, children);
}

function parseTag(tag) {
  const [name] = tag.split(/[.#]/);
  return { name: name || "div" };
}

function build(el, tag, attrs, children) {
  for (const part of tag.match(/[.#][^.#]+/g) || []) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * Text with `backticks` turned into <code> (diagnostic messages are written that way), every
 * "line N" said as lines.js says it (a notebook's "cell C, line M"), and, given onLine, each
 * such place a button that shows that source line.
 */
export function richText(text, onLine = null) {
  return String(text).split(/(`[^`]+`)/).flatMap((part) => {
    if (part.startsWith("`") && part.endsWith("`") && part.length > 1) return [h("code", {}, part.slice(1, -1))];
    return part.split(/(\b(?:cell \d+, )?[Ll]ine \d+)/).map((bit) => {
      const m = /^(?:cell (\d+), )?([Ll])ine (\d+)$/.exec(bit);
      if (!m) return bit;
      // "cell C, line M" was said by the server already; a bare "line N" is the script's, and
      // "Line N" starts a sentence: said as "Cell C, line M" in a notebook
      const line = m[1] ? scriptLine(Number(m[1]), Number(m[3])) : Number(m[3]);
      const label = lineLabel(line);
      const said = m[1] ? bit : m[2] === "L" ? label[0].toUpperCase() + label.slice(1) : label;
      return onLine && line ? h("button.link.line-link", { type: "button", onclick: () => onLine(line) }, said) : said;
    });
  });
}

/** Numbers as the schema sends them: finite numbers, or "NaN"/"Infinity"/"-Infinity". */
export function num(x) {
  if (typeof x === "number") return x;
  if (x === "NaN") return NaN;
  if (x === "Infinity") return Infinity;
  if (x === "-Infinity") return -Infinity;
  return NaN;
}

export function fmt(x, digits = 4) {
  const v = num(x);
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-3) return v.toExponential(digits - 1);
  return v.toPrecision(digits).replace(/(\.\d*?)0+$/, "$1").replace(/\.$/, "");
}

export function signed(x, digits = 4) {
  const v = num(x);
  return (v > 0 ? "+" : v < 0 ? "−" : "") + fmt(Math.abs(v), digits);
}

export function shapeText(shape) {
  return shape ? `(${shape.join(", ")})` : "";
}

/** A byte count for people: 812 B, 1.2 kB, 35 MB (powers of 1000). */
export function bytesText(n) {
  if (n < 1000) return `${n} B`;
  const units = ["kB", "MB", "GB", "TB"];
  let v = n;
  let unit = "B";
  for (const u of units) {
    if (v < 1000) break;
    v /= 1000;
    unit = u;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${unit}`;
}
