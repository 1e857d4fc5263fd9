// Presenter mode: the graph and the narration only, in type that reads from the back of a room
// (the graph is drawn in larger type for it: trace_page.js PRESENT_FONT), driven by the
// keyboard. The narration is walked one paragraph ("step") at a time; a step may point at a
// parameter, a node or a source line (its `Show:` line, app/catalog.py), which is selected
// while it is on screen, and the graph opens on that part of it; a parameter's bars are shown
// beside the graph. After the last step, → goes on into the backward replay. The state is the
// view's `present` and `say` (permalink.js), so a class follows it too.
//
// Presenter mode hides the source, the diagnostics and the heat maps, so whatever a step's
// `Show:` line points at is brought into the presenter's own box (presenterShows): a few lines
// of source around its line, the diagnostics it names, and its parameter's heat map beside the
// graph; a target this run lacks (another variant's) is said so in words. The variant changes
// here too (its buttons, or V), and the keys work wherever the focus was left
// (installPresenterKeys).

import { fill, h, richText } from "./dom.js";
import { isTextField, keepsKeys, watchPointer } from "./keys.js";
import { compiledCounts } from "./panel.js";

/** Text with `code` in backticks, as nodes (never innerHTML: see dom.js). */
function inline(text) {
  return text.split("`").map((part, i) => (i % 2 ? h("code", {}, part) : part));
}

/** Step `n` of an address (`say=N`, whoever wrote it) as the nearest step there is, 1 to
 *  `count`; null where there are none or none was named. */
export function nearestStep(n, count) {
  if (n === null || n === undefined || !count) return null;
  return Math.min(Math.max(n, 1), count);
}

/** The view changes that show step `n` (1-based) of `steps`. */
export function stepView(steps, n, { doc, shown, findLine }) {
  const step = steps[n - 1];
  const changes = { say: n, step: null, node: null, param: null, line: null, cell: null };
  if (!step) return changes;
  for (const item of step.show) {
    const param = item.param || item.heatmap; // a heat map is its parameter's, in its panel
    if (param && doc && doc.params[param]) {
      changes.param = param;
      const node = shown && shown.graph.nodes.find((x) => x.param === param);
      if (node) changes.node = node.id;
    } else if (item.node && shown) {
      const node = shown.graph.nodes.find((x) => x.name === item.node);
      if (node) changes.node = node.id;
    } else if (item.line !== undefined) {
      changes.line = typeof item.line === "number" ? item.line : findLine(item.line);
    }
  }
  return changes;
}

// lines of source shown around a step's line: enough to read it in its place, few enough to
// leave a 1280 x 720 projector room for the bars
const AROUND = 1;

/** What the step points at that the graph cannot show, as nodes for the presenter's box:
 *  the source around its line, what AOTAutograd made of a compiled region's node (its panel is
 *  hidden), the diagnostics it names, and a sentence for each target that this run does not
 *  have. `ctx`: {doc, event, lineText(n), variants}. */
function presenterShows(step, view, { doc, event, lineText, variants }) {
  const out = [];
  const node = view.node && event && step && step.show.some((item) => item.node) ?
    event.graph.nodes.find((n) => n.id === view.node) : null;
  const region = node && node.compiled_region !== undefined && doc ?
    (doc.compiled_regions || []).find((r) => r.id === node.compiled_region) : null;
  if (region && region.forward) {
    out.push(h("p.presenter-region", { dataset: { region: String(region.id) } },
      h("strong", {}, "Compiled by AOTAutograd: "), compiledCounts(region)));
  }
  const line = view.line;
  if (line && lineText(line)) {
    const texts = [];
    for (let n = Math.max(1, line - AROUND); n <= line + AROUND; n++) {
      if (lineText(n).trim() || n === line) texts.push([n, lineText(n)]);
    }
    // the target's own indent taken off (a method's body is 8 columns in), so the narrow
    // presenter column shows the code, not its margin; context lines keep their relative indent
    const indent = lineText(line).length - lineText(line).trimStart().length;
    const rows = texts.map(([n, text]) => h(`li.presenter-line${n === line ? ".is-target" : ""}`, { dataset: { line: String(n) } },
      h("span.presenter-lineno", { "aria-hidden": "true" }, String(n)),
      h("code", {}, text.slice(Math.min(indent, text.length - text.trimStart().length)))));
    out.push(h("ol.presenter-source", { "aria-label": `Source around line ${line}` }, rows));
  }
  const missing = [];
  for (const item of step ? step.show : []) {
    if (item.diagnostic) {
      // those about the step's parameter, when it names one and they do: one finding per
      // parameter of the same kind would crowd the projector's column
      const all = (doc ? doc.diagnostics : []).filter((d) => d.code === item.diagnostic);
      const about = view.param ? all.filter((d) => (d.params || []).includes(view.param)) : [];
      const found = about.length ? about : all;
      if (found.length) {
        out.push(h("ul.presenter-diagnostics", { dataset: { code: item.diagnostic } }, found.map((d) =>
          h(`li.diag-${d.level}`, {}, h(`span.badge.badge-${d.level}`, { "aria-hidden": "true" }, d.level === "info" ? "i" : "!"),
            ...richText(d.message)))));
      } else {
        missing.push([`This run has no “${item.diagnostic}” finding`, "diagnostic", item.diagnostic]);
      }
    } else if (item.heatmap) {
      const grad = event && ((event.grads || {})[item.heatmap] || {}).after;
      if (!doc || !doc.params[item.heatmap]) missing.push([`This run has no parameter ${item.heatmap}`, "heatmap", item.heatmap]);
      else if (!grad) missing.push([`No heat map: ${item.heatmap} has no gradient in this run`, "heatmap", item.heatmap]);
    } else if (item.param && (!doc || !doc.params[item.param])) {
      missing.push([`This run has no parameter ${item.param}`, "param", item.param]);
    } else if (item.line !== undefined && !line) {
      missing.push([`No line “${item.line}” in this script`, "line", String(item.line)]);
    }
  }
  if (missing.length) {
    // where the scenario has variants, the step's text is about one of the others
    const other = Object.keys(variants || {}).length > 1 ? " (another variant may have it: V switches)" : "";
    out.push(h("ul.presenter-missing", {}, missing.map(([text, kind, name]) =>
      h("li", { dataset: { kind, name } }, text, other, "."))));
  }
  return out;
}

/** Whether the step on screen wants its parameter's heat map beside the graph. */
function wantsHeatmap(step, view) {
  return Boolean(step && view.param && step.show.some((item) => item.heatmap === view.param));
}

/** The variants as buttons in the presenter's bar: the one on show pressed. */
function variantButtons(variants, current, onVariant) {
  const names = Object.keys(variants || {});
  if (!names.length) return [];
  return [h("span.presenter-variants-label", {}, "Variant (V):"), ...names.map((name) =>
    h("button", { type: "button", title: variants[name], "aria-pressed": name === current ? "true" : "false",
      dataset: { variant: name }, onclick: () => onVariant(name) }, name))];
}

const oneColumn = window.matchMedia("(max-width: 900px)");
// a phone (graph.js's test): the step's text is a strip of a few lines above the graph, so the
// graph and the nodes the step names are on the first screen; "More" opens the whole step
const narrow = window.matchMedia("(max-width: 600px)");
let opened = null; // the step whose whole text a phone's reader opened ("say|variant")
// the least the step's text is shrunk to, so that it and what it points at fit the screen
const LEAST_FIT = 0.7;

/** Shrink the step's text (CSS zoom, --present-fit) until the page fits the screen's height:
 *  a long step and the bars or heat map below it must be seen together, not scrolled to. */
export function fitToScreen() {
  const body = document.body;
  body.style.setProperty("--present-fit", "1");
  // one column (a phone, a tablet: app.css) scrolls anyway: its text keeps its size
  if (oneColumn.matches) return;
  const over = () => document.documentElement.scrollHeight > window.innerHeight + 1;
  let fit = 1;
  while (over() && fit > LEAST_FIT) {
    fit = Math.round((fit - 0.05) * 100) / 100;
    body.style.setProperty("--present-fit", String(fit));
  }
}

/** Move the focus off a control that presenter mode just hid, onto the presenter itself, so
 *  Tab starts from what is on screen. */
function parkFocus(box) {
  const el = document.activeElement;
  if (el && el !== document.body && !el.getClientRects().length) box.focus({ preventScroll: true });
}

/** Draw the presenter's text box for the view. */
export function renderPresenter(box, steps, view, replay, ctx) {
  const entering = box.hidden && Boolean(view.present);
  box.hidden = !view.present;
  if (!view.present) {
    document.body.style.removeProperty("--present-fit");
    document.body.classList.remove("presenting-wide");
  }
  document.body.classList.toggle("presenting", Boolean(view.present));
  // a step that names a parameter shows its bars beside the graph (the details panel, large)
  document.body.classList.toggle("presenting-param", Boolean(view.present && view.param));
  const n = view.say;
  const step = n ? steps[n - 1] : null;
  document.body.classList.toggle("presenting-heatmap", Boolean(view.present && wantsHeatmap(step, view)));
  if (!view.present) return;
  if (entering) parkFocus(box);
  const label = step && step.text.match(/^(Question|Answer|What to look at|Try):\s*/i);
  const text = step ? (label ? [h("strong", {}, label[1] + ": "), inline(step.text.slice(label[0].length))] : inline(step.text)) :
    "Presenter mode: → and ← walk the backward replay.";
  // the hint at the last step is a span of its own: a short projector drops it (app.css)
  const where = replay ? `Replay: step ${replay.step} of ${replay.total}` :
    steps.length ? [`Step ${n || 0} of ${steps.length}`,
      n === steps.length ? h("span.presenter-next", {}, " · → replays the backward pass") : null] : "";
  fill(box.querySelector(".presenter-text"), h("p", {}, text), presenterShows(step, view, ctx));
  fill(box.querySelector(".presenter-where"), where);
  compact(box, `${n}|${ctx.variant}`, ctx.onResize);
  const variants = box.querySelector(".presenter-variants");
  fill(variants, variantButtons(ctx.variants, ctx.variant, ctx.onVariant));
  variants.hidden = !variants.childElementCount;
  fitToScreen();
}

/** On a phone, the step's text folded to a strip (app.css .is-compact: three lines, the
 *  step's source line, nothing more) with a button that opens the rest; a new step comes
 *  folded again. Elsewhere, and where nothing is cut, no button. `onResize`: the presenter's
 *  height changed (the graph below it is sized to the rest of the screen). */
function compact(box, key, onResize) {
  let more = box.querySelector(".presenter-more");
  if (!more) {
    more = h("button.presenter-more", { type: "button", "aria-expanded": "false" }, "More");
    box.querySelector(".presenter-where").after(more);
  }
  if (opened !== key) opened = null;
  const folded = narrow.matches && opened === null;
  box.classList.toggle("is-compact", folded);
  more.onclick = () => {
    opened = opened === key ? null : key;
    compact(box, key, onResize);
    if (onResize) onResize();
  };
  // the button only where folding hides something (a short step fits its three lines)
  const text = box.querySelector(".presenter-text");
  const first = text.querySelector(":scope > p");
  const hidden = [...text.querySelectorAll(":scope > *, .presenter-line")].some((el) => !el.getClientRects().length);
  const long = [...text.querySelectorAll(".presenter-line code")].some((c) => c.scrollWidth > c.clientWidth + 1);
  const cut = folded && (hidden || long || Boolean(first && first.scrollHeight > first.clientHeight + 1));
  more.hidden = !narrow.matches || (folded && !cut);
  more.textContent = folded ? "More ▾" : "Less ▴";
  more.setAttribute("aria-expanded", folded ? "false" : "true");
}

/** The next variant after the one on show (`by` -1: the one before), round the list. */
export function nextVariant(variants, current, by = 1) {
  const names = Object.keys(variants || {});
  if (!names.length) return null;
  const at = names.indexOf(current);
  return names[(Math.max(at, 0) + by + names.length) % names.length];
}

/** The presenter's keys, taken before the page's own (keys.js) and before any control: P on
 *  and off, → ← the steps and the replay, Esc off, V and Shift+V the next and previous
 *  variant. Esc leaves from anywhere; every other key stays with a text field, and P with a
 *  control the keyboard reached that uses letters (a select). */
export function installPresenterKeys({ ready, presenting, toggle, forward, back, leave, variant }) {
  watchPointer();
  window.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey || !ready()) return;
    const on = presenting();
    let action = null;
    if (e.key === "Escape") action = on ? leave : null;
    else if (isTextField(e.target)) return;
    else if (e.key === "p" || e.key === "P") action = on || !keepsKeys(e.target, e.key) ? toggle : null;
    else if (on) action = { ArrowRight: forward, ArrowLeft: back, v: () => variant(1), V: () => variant(-1) }[e.key];
    if (!action) return;
    e.preventDefault();
    e.stopImmediatePropagation();
    action();
  }, true);
}
