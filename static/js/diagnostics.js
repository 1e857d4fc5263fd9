// "What to notice": the Trace's diagnostics, each one a button that shows what it points at.

import { h, fill, richText } from "./dom.js";

const GLYPH = { info: "i", warning: "!", error: "!!" };

export function renderDiagnostics(section, list, diagnostics, { onPick, onLine }) {
  section.hidden = !diagnostics.length;
  // each entry reachable by id and focusable: the findings strip above the graph links here
  fill(list, diagnostics.map((d, i) => h(`li.diag.diag-${d.level}`, { id: `diag-${i}`, tabindex: "-1" },
    h(`span.badge.badge-${d.level}`, { "aria-hidden": "true" }, GLYPH[d.level] || "!"),
    h("span.sr-only", {}, `${d.level}: `),
    h("span.diag-message", {}, ...richText(d.message, onLine)),
    (d.params && d.params.length) || (d.nodes && d.nodes.length) ?
      h("button.link.diag-show", { type: "button", onclick: () => onPick(d) },
        d.params && d.params.length ? `show ${d.params[0]}` : `show ${d.nodes.length} node${d.nodes.length > 1 ? "s" : ""}`) : "")));
}
