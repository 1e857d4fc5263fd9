// A parameter's `.grad` after one backward pass next to what it was after another (issue 35:
// "`.grad` after #1 vs after #3"), read from the Trace alone: every pass records each
// parameter's `.grad` before and after it (`grads`), so the gaps between passes say whether
// anything cleared `.grad` (zero_grad sets None, or zeros with set_to_none=False) or the script
// changed it outside a backward, and the passes in between say what they added.

import { h, fmt } from "./dom.js";
import { heatmap, maxAbs, colourBar, matrix, measure, valueAt } from "./heatmap.js";
import { lineLabel } from "./lines.js";

const MAP_WIDTH = 150;

/** The passes that fill `.grad` and recorded this parameter's: torch.autograd.grad returns its
 *  gradients and leaves `.grad` alone, so it is no pass to compare `.grad` after. */
export function gradPasses(doc, name) {
  return doc.events.filter((e) => e.kind === "backward" && !Array.isArray(e.inputs) &&
    e.grads && e.grads[name]);
}

/** The pair to compare: the one asked for where both are passes of this parameter, else the
 *  first pass and the one shown (or the last, when the first is shown). */
export function comparePair(doc, name, asked, shownIndex) {
  const passes = gradPasses(doc, name).map((e) => e.index);
  if (passes.length < 2) return null;
  if (Array.isArray(asked) && asked.length === 2 && asked[0] !== asked[1] &&
      asked.every((i) => passes.includes(i))) return [...asked].sort((a, b) => a - b);
  const later = passes.includes(shownIndex) && shownIndex !== passes[0] ? shownIndex : passes[passes.length - 1];
  return [passes[0], later];
}

/** Two summaries of one `.grad` hold the same tensor: their values where both kept them, else
 *  every statistic the Trace wrote (a run past its budget of numbers keeps only those). */
export function sameGrad(a, b) {
  if (!a || !b) return !a && !b;
  const x = matrix(a);
  const y = matrix(b);
  if (x && y) return x.data.length === y.data.length && x.data.every((v, i) => Object.is(v, y.data[i]));
  return ["numel", "norm", "min", "max", "mean", "abs_mean"].every((k) => Object.is(a[k], b[k])) &&
    JSON.stringify(a.shape) === JSON.stringify(b.shape);
}

/** None, or all zeros: what zero_grad() leaves (None by default since torch 2.0). */
function cleared(summary) {
  return !summary || summary.norm === 0;
}

/**
 * What happened to `.grad` of `name` from after pass `a` to after pass `b` (a < b), from the
 * recorded passes: {from, to, added: [pass indices that changed it], clear: {before, none} | null
 * (the last time it was cleared), changed: [{after, before}] (gaps where the script changed it),
 * steps: [step events that used it in between]}.
 */
export function gradStory(doc, name, a, b) {
  const first = doc.events.find((e) => e.index === a);
  const last = doc.events.find((e) => e.index === b);
  // an autograd.grad pass between leaves .grad alone: a gap spans it
  const seen = gradPasses(doc, name).filter((e) => e.index > a && e.index <= b);
  let held = first.grads[name].after;
  let heldAt = a;
  const added = [];
  const changed = [];
  let clear = null;
  for (const e of seen) {
    const { before, after } = e.grads[name];
    if (!sameGrad(held, before)) {
      if (cleared(before)) { // None, or zeros: from whatever it held (zeros to None too)
        clear = { before: e.index, none: !before };
        added.length = 0; // what was there before it is gone
        changed.length = 0;
      } else {
        changed.push({ after: heldAt, before: e.index });
      }
    }
    if (!sameGrad(before, after)) added.push(e.index);
    held = after;
    heldAt = e.index;
  }
  const steps = doc.events.filter((e) => e.kind === "step" && e.index > a && e.index < b &&
    (e.params || {})[name]);
  return { from: first.grads[name].after, to: last.grads[name].after, added, clear, changed, steps };
}

const passes = (list) => (list.length === 1 ? `backward #${list[0]}` :
  `backwards ${list.slice(0, -1).map((i) => `#${i}`).join(", ")} and #${list[list.length - 1]}`);

/** The story in words: each sentence a fact the recorded passes show. */
export function storySentences(story, a, b) {
  const out = [];
  const { added, clear, changed, steps } = story;
  if (clear) {
    const how = clear.none ? "set to None (what zero_grad() does)" :
      "set to all zeros (what zero_grad(set_to_none=False) does)";
    if (clear.before === b) {
      out.push(`.grad cleared between: it was ${how} before backward #${b}, so #${b} started from ` +
        `${clear.none ? "nothing" : "zero"}, and nothing of what #${a} left is in it.`);
    } else {
      out.push(`.grad cleared between: it was ${how} before backward #${clear.before}, so nothing of what ` +
        `#${a} left is in .grad after #${b}` + (added.length ? `: it holds what ${passes(added)} added.` : "."));
    }
  } else if (changed.length) {
    out.push(changed.map((c) => `.grad changed between backward #${c.after} and #${c.before}, outside any backward pass: ` +
      "the script itself changed it (clipping, scaling or an assignment, say).").join(" "));
    if (added.length) out.push(`${capital(passes(added))} added onto what ${added.length === 1 ? "it" : "they"} found, not onto what #${a} left.`);
  } else if (!story.from && added.length) {
    out.push(`.grad was still None after backward #${a}: what it holds after #${b} is what ${passes(added)} added.`);
  } else if (added.length) {
    const skipped = added[added.length - 1] !== b ? ` (backward #${b} did not change it)` : "";
    out.push(`${capital(passes(added))} added onto what #${a} left: no zero_grad between${skipped}.`);
  } else {
    out.push(`.grad after backward #${b} is what #${a} left: no backward in between changed it and nothing cleared it.`);
  }
  if (steps.length && !clear && !changed.length) {
    out.push(`${steps.map((s) => `Step #${s.index} (${s.optimizer})`).join(" and ")} used this .grad in between and ` +
      "left it as it was (a step reads .grad; zero_grad is what clears it).");
  }
  return out;
}

function capital(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** to − from entry by entry, None read as zeros (what a pass adds onto None is its gradient);
 *  null where either has no values kept. */
function difference(to, from) {
  const b = to ? matrix(to) : null;
  const a = from ? matrix(from) : null;
  if ((to && !b) || (from && !a) || (!a && !b)) return null;
  const size = (b || a).data.length;
  if (a && b && a.data.length !== b.data.length) return null;
  const data = Array.from({ length: size }, (_, i) => (b ? b.data[i] : 0) - (a ? a.data[i] : 0));
  const shape = (to || from).shape;
  return { shape, numel: size, values: nest(data, shape), norm: Math.hypot(...data),
    min: Math.min(...data), max: Math.max(...data) };
}

function nest(flat, shape) {
  if (shape.length <= 1) return shape.length === 0 ? flat[0] : flat;
  const size = flat.length / shape[0];
  return Array.from({ length: shape[0] }, (_, i) => nest(flat.slice(i * size, (i + 1) * size), shape.slice(1)));
}

/**
 * The compare section of a parameter's panel: two pass pickers, the story in words, a table of
 * `.grad`'s norm and sum (or one entry) after each and their difference, and heat maps.
 * hooks: {compare ([a, b] asked, or null: closed), onCompare([a, b] | null), cell}
 */
export function gradCompare(doc, event, name, hooks) {
  const list = gradPasses(doc, name);
  if (list.length < 2 || !hooks.onCompare) return null;
  const box = h("section.grad-compare", { "aria-label": "Compare .grad after two backward passes" });
  if (!hooks.compare) {
    box.append(h("button.link.compare-open", { type: "button", onclick: () =>
      hooks.onCompare(comparePair(doc, name, null, event.index)) },
    `Compare .grad after two backward passes (${list.length} passes)`));
    return box;
  }
  const [a, b] = comparePair(doc, name, hooks.compare, event.index);
  const story = gradStory(doc, name, a, b);
  const pick = (which) => (e) => {
    const next = [a, b];
    next[which] = Number(e.target.value);
    if (next[0] === next[1]) next[1 - which] = list.map((p) => p.index).find((i) => i !== next[which]);
    hooks.onCompare(next);
  };
  const select = (which, chosen, label) => h("label", {}, label, " ", h(`select.compare-${which ? "later" : "earlier"}`,
    { onchange: pick(which) }, list.map((e) => h("option", { value: String(e.index), selected: e.index === chosen },
      `#${e.index}${e.line ? ` (${lineLabel(e.line)})` : ""}`))));
  box.append(h("h4", {}, "Compare ", h("code", {}, ".grad"), " after two backward passes"),
    h("p.compare-pick", {}, select(0, a, ".grad after backward"), " ", select(1, b, "with .grad after backward"), " ",
      h("button.link.compare-close", { type: "button", onclick: () => hooks.onCompare(null) }, "close")));
  storySentences(story, a, b).forEach((text) => box.append(h("p.compare-says", {}, text)));

  const plain = !story.clear && !story.changed.length;
  const diff = difference(story.to, story.from);
  const cell = hooks.cell && story.to && valueAt(story.to, hooks.cell) !== null ? hooks.cell : null;
  const what = cell ? `entry [${cell.join(", ")}]` : "sum of all entries";
  const value = (s) => (s ? fmt(measure(s, cell), 6) : "None");
  const norm = (s) => (s ? fmt(s.norm, 6) : "None");
  const diffLabel = plain && story.added.length ? `what ${passes(story.added)} added` : `after #${b} − after #${a}`;
  // None − None has no difference to show; None read as zeros otherwise
  const both = story.from || story.to;
  const sumDiff = both ? fmt(measure(story.to, cell) - measure(story.from, cell), 6) : "—";
  const normDiff = diff ? fmt(diff.norm, 6) : both ? "not kept (values past the run's budget)" : "—";
  box.append(h("table.kv.compare-table", {},
    h("thead", {}, h("tr", {}, h("th", {}, ""), h("th", {}, `after #${a}`), h("th", {}, `after #${b}`), h("th", {}, diffLabel))),
    h("tbody", {},
      h("tr.compare-norm", {}, h("th", {}, "‖.grad‖"), h("td.num", {}, norm(story.from)), h("td.num", {}, norm(story.to)),
        h("td.num", {}, normDiff)),
      h("tr.compare-sum", {}, h("th", {}, what), h("td.num", {}, value(story.from)), h("td.num", {}, value(story.to)),
        h("td.num", {}, sumDiff)))));
  if (diff && (matrix(story.to) || matrix(story.from))) {
    const scale = maxAbs(story.from, story.to, diff);
    const size = { maxWidth: MAP_WIDTH, scale, picked: cell, onCell: hooks.onCell };
    box.append(colourBar(scale), h("div.heatmaps", {},
      story.from ? heatmap(story.from, { title: `after #${a}`, ...size }) : "",
      story.to ? heatmap(story.to, { title: `after #${b}`, ...size }) : "",
      heatmap(diff, { title: diffLabel, ...size })));
  }
  return box;
}
