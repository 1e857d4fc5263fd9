// The parameter list: every parameter (and named leaf) of the run, how often the current graph
// uses it, its gradient's size, and a badge where a diagnostic points at it.

import { h, fmt, shapeText } from "./dom.js";

export function paramList(doc, event, { selected, diagnostics, onParam }) {
  const names = Object.keys(doc.params);
  if (!names.length) return h("p.hint", {}, "This run has no parameters or named leaves.");
  const levels = new Map();
  for (const d of diagnostics) {
    if (d.level === "info" && d.code === "multiple_uses") {
      for (const p of d.params || []) if (!levels.has(p)) levels.set(p, "info");
    } else {
      for (const p of d.params || []) levels.set(p, d.level === "error" || levels.get(p) === "error" ? "error" : d.level);
    }
  }
  const backward = event && event.kind === "backward" ? event : null;
  const firstUnreached = names.find((n) => {
    const p = doc.params[n];
    return p.requires_grad && !p.grad && !Object.values(p.uses || {}).some(Boolean);
  });
  return h("table.params", {},
    h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "shape"),
      h("th.num", { title: backward ? `uses in backward #${backward.index}` : "uses in all backward passes" }, "uses"),
      h("th.num", { title: backward ? `norm of .grad after backward #${backward.index}` : "norm of .grad at the end" }, "‖.grad‖"))),
    h("tbody", {}, names.flatMap((name) => {
      const info = doc.params[name];
      // the trace lists the parameters no backward reached last (a template only copied, a
      // module never called): one heading row, then them, grouped by module
      const unreached = info.requires_grad && !info.grad && !Object.values(info.uses || {}).some(Boolean);
      const heading = unreached && name === firstUnreached ? [h("tr.unreached-head", {},
        h("td", { colspan: 4 }, "Never reached by a backward pass (a module never called, or a template only copied):"))] : [];
      const uses = backward ? (backward.uses || {})[name] ?? 0 : Object.values(info.uses || {}).reduce((a, b) => a + b, 0);
      const grad = backward ? ((backward.grads || {})[name] || {}).after : info.grad;
      const level = levels.get(name);
      return [...heading, h("tr", { class: [name === selected ? "selected" : "", unreached ? "unreached" : ""].join(" ").trim() || null },
        h("td", {}, h("button.param-button", { type: "button", "aria-pressed": String(name === selected),
          dataset: { param: name }, onclick: () => onParam(name) }, breakable(name)),
        level ? h(`span.badge.badge-${level}`, { title: `${level}: see “What to notice”` }, level === "info" ? "i" : "!") : "",
        info.requires_grad ? "" : h("span.tag", {}, "no grad")),
        h("td", {}, shapeText(info.shape)),
        // .grad filled by a backward torch ran inside this one: its uses there are not counted
        h("td.num", { class: uses > 1 ? "many" : null, title: !uses && innerOf(backward, name) ?
          "its gradient came through a backward run inside this one, whose uses are not counted" : null },
        !uses && innerOf(backward, name) ? "inner" : String(uses)),
        h("td.num", {}, grad ? fmt(grad.norm) : "None"))];
    })));
}

/** A dotted name that may wrap after a dot, never inside a word. */
function breakable(name) {
  return name.split(".").flatMap((part, i) => (i ? [".", h("wbr"), part] : [part]));
}

/** Did a backward run inside `backward` (a reentrant checkpoint's) fill this leaf's .grad? */
function innerOf(backward, name) {
  return Boolean(backward && (backward.inner || []).includes(name));
}
