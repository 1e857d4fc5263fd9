// Findings first: above the graph, one line per diagnostic in plain words, the most serious
// first, each a button that picks what it names. The whole text stays in "What to notice"
// below (diagnostics.js); this strip is what a reader sees before scrolling.

import { h, fill, richText } from "./dom.js";

const RANK = { error: 0, warning: 1, info: 2 };
const GLYPH = { info: "i", warning: "!", error: "!!" };
// lines in the strip, the rest counted and one link away: the graph keeps the first screen's
// height, so warnings get three lines, information alone one, a phone one
const SHOWN = 3;
const SHOWN_INFO_ONLY = 1;
const phone = window.matchMedia("(max-width: 600px)");
const SUMMARY_CHARS = 150;
const SHORT_SENTENCE = 90; // a first sentence this short is followed by the second

/** The diagnostics, most serious first; the tracer's own order within a level (it ranks the
 *  classic causes first). */
export function ranked(diagnostics) {
  return diagnostics.map((d, i) => [d, i])
    .sort((a, b) => (RANK[a[0].level] ?? 3) - (RANK[b[0].level] ?? 3) || a[1] - b[1])
    .map(([d]) => d);
}

/** Where the sentence that starts at `from` ends (past its full stop). Dots inside `code`
 *  (`.data`, `torch.no_grad`) and in "e.g." end nothing. */
function sentenceEnd(text, from) {
  let inCode = false;
  for (let i = from; i < text.length; i += 1) {
    const c = text[i];
    if (c === "`") inCode = !inCode;
    else if (!inCode && ".!?".includes(c) && (i + 1 === text.length || text[i + 1] === " ") &&
      !/\be\.g$|\bi\.e$|\bvs$/.test(text.slice(Math.max(0, i - 4), i))) return i + 1;
  }
  return text.length;
}

/** The strip's line: the message's first sentence, and its second where the first is short
 *  (it usually says what happened, the second why: "x received no gradient. The script reads
 *  it through `.data` (line 61) …"), cut at a word near SUMMARY_CHARS. */
export function summary(message) {
  const text = String(message);
  let end = sentenceEnd(text, 0);
  if (end < SHORT_SENTENCE && end < text.length) end = sentenceEnd(text, end + 1);
  let first = text.slice(0, end);
  if (first.length > SUMMARY_CHARS) {
    const cut = first.lastIndexOf(" ", SUMMARY_CHARS);
    first = first.slice(0, cut > 40 ? cut : SUMMARY_CHARS);
    // a cut inside `code` would leave an unmatched backtick
    if ((first.match(/`/g) || []).length % 2) first += "`";
    first += " …";
  }
  return first;
}

/**
 * Fill the strip. `onPick(d)`: select what the finding names (a parameter, nodes);
 * `onRead(d, index)`: take the reader to its whole text in "What to notice" (index in
 * `diagnostics` as given).
 */
export function renderFindings(section, list, moreSlot, diagnostics, { onPick, onRead }) {
  const order = ranked(diagnostics);
  section.hidden = !order.length;
  const shown = phone.matches || order.every((d) => d.level === "info") ? SHOWN_INFO_ONLY : SHOWN;
  const more = order.length - shown;
  fill(list, ...order.slice(0, shown).map((d) => {
    const names = (d.params && d.params.length) || (d.nodes && d.nodes.length);
    return h(`li.finding.finding-${d.level}`, {},
      h("button.finding-pick", {
        type: "button",
        title: d.message,
        onclick: () => (names ? onPick(d) : onRead(d, diagnostics.indexOf(d))),
      },
      h(`span.badge.badge-${d.level}`, { "aria-hidden": "true" }, GLYPH[d.level] || "!"),
      h("span.sr-only", {}, `${d.level}: `),
      h("span.finding-text", {}, ...richText(summary(d.message)))),
      h("button.link.finding-read", { type: "button", onclick: () => onRead(d, diagnostics.indexOf(d)) },
        "read it"));
  }));
  // how many more, beside the strip's title: a line of its own would take the graph's height
  fill(moreSlot, more > 0 ? h("button.link.finding-more", { type: "button",
    onclick: () => onRead(order[shown], diagnostics.indexOf(order[shown])) }, `+${more} below`) : "");
}
