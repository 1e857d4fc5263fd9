// The run's events in order (backward #0, step #1, backward #2 ...): one button each.

import { h, fill } from "./dom.js";
import { lineLabel } from "./lines.js";

export function renderTimeline(nav, doc, current, { onEvent }) {
  const skipped = doc.events_skipped || {};
  const more = (skipped.backward || 0) + (skipped.step || 0);
  fill(nav, h("span.timeline-title", {}, "Events:"),
    doc.events.map((e) => h("button.event", {
      type: "button", "aria-pressed": String(e.index === current), dataset: { event: String(e.index), kind: e.kind },
      title: e.kind === "backward" ? `${e.call || "backward"}${e.line ? ` at ${lineLabel(e.line)}` : ""}` :
        `${e.optimizer}.step()${e.line ? ` at ${lineLabel(e.line)}` : ""}`,
      onclick: () => onEvent(e.index),
    }, h("span.event-glyph", { "aria-hidden": "true" }, e.kind === "backward" ? "◆" : "▲"),
    ` ${e.kind} #${e.index}`, e.synthetic ? " (no backward call)" : "",
    e.error ? h("span.event-failed", { title: `${e.error.type}: ${e.error.message}` }, " ✖ failed") : "")),
    more ? h("span.hint", {}, ` +${more} more not recorded`) : "");
}
