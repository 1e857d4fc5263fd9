// Every variant of one scenario side by side: each column is one run, its graph as the server
// draws it, per parameter its number of uses and the size of its gradient, and the bytes its
// first pass held for backward, by module. Rows where the variants disagree are marked, since
// that difference is the scenario.

import { fetchTrace, graphUrl } from "./api.js";
import { checkpointPassParts } from "./checkpoints.js";
import { bytesText, fill, fmt, h, richText } from "./dom.js";
import { moduleBars, shareScale } from "./memory_bars.js";
import { explain } from "./status.js";

const page = JSON.parse(document.getElementById("page-data").textContent);
const scenario = page.scenario;
const defaults = Object.fromEntries(Object.entries(scenario.options || {}).map(([k, spec]) => [k, String(spec.default)]));
const cards = [...document.querySelectorAll(".compare-card")];

function facts(doc) {
  const first = doc.events.find((e) => e.kind === "backward");
  const rows = {};
  for (const name of Object.keys(doc.params)) {
    const grad = first && first.grads && first.grads[name] ? first.grads[name].after : doc.params[name].grad;
    const uses = first ? (first.uses || {})[name] ?? 0 : 0;
    // .grad filled by a backward torch ran inside this one (a reentrant checkpoint's): its uses
    // there are not counted, so "0" would be false (the run page says "inner" too: params.js)
    const inner = !uses && first && (first.inner || []).includes(name);
    rows[name] = { uses: inner ? "inner" : uses, grad: grad ? fmt(grad.norm) : "None" };
  }
  return { first, rows };
}

async function load(card) {
  const variant = card.dataset.variant;
  const run = { variant, device: "cpu", options: defaults };
  const status = card.querySelector(".compare-status");
  const t0 = performance.now();
  const timer = setInterval(() => { status.textContent = `running… ${((performance.now() - t0) / 1000).toFixed(1)} s`; }, 200);
  try {
    const doc = await fetchTrace(scenario.name, run);
    const { first, rows } = facts(doc);
    const failed = doc.events.filter((e) => e.error);
    status.textContent = `${doc.events.length} event${doc.events.length === 1 ? "" : "s"}` +
      (failed.length ? `; ${failed.map((e) => `${e.kind} #${e.index}`).join(", ")} failed` : "");
    if (first) {
      card.querySelector(".compare-graph").append(h("img", { src: graphUrl(scenario.name, run, first.index),
        alt: `backward graph of the ${variant} variant` }));
    }
    fill(card.querySelector(".compare-facts"),
      h("table.params", {}, h("thead", {}, h("tr", {}, h("th", {}, "parameter"), h("th.num", {}, "uses"), h("th.num", {}, "‖.grad‖"))),
        h("tbody", {}, Object.entries(rows).map(([name, r]) => h("tr", { dataset: { param: name } },
          h("td", {}, h("code", {}, name)), h("td.num.uses", {}, String(r.uses)), h("td.num.grad", {}, r.grad))))),
      doc.diagnostics.length ? h("ul.diag-inline", {}, doc.diagnostics.map((d) => h(`li.diag-${d.level}`, {},
        h(`span.badge.badge-${d.level}`, { "aria-hidden": "true" }, d.level === "info" ? "i" : "!"), ...richText(d.message)))) : "",
      failed.map((e) => h("p.notice.notice-error", {}, `${e.kind} #${e.index}: ${e.error.type}: ${e.error.message}`)),
      memory(first));
    return rows;
  } catch (err) {
    card.classList.add("failed");
    status.textContent = explain(err);
    return null;
  } finally {
    clearInterval(timer);
  }
}

/** What the first pass held for backward, and by module, on the scale all columns share. */
function memory(first) {
  const m = first && first.saved_memory;
  if (!m) return "";
  return h("div.compare-memory", {},
    h("p", { dataset: { held: String(m.held_bytes) } },
      h("strong", {}, `Held for backward #${first.index}: ${bytesText(m.held_bytes)}`),
      m.leaf_bytes ? ` besides ${bytesText(m.leaf_bytes)} of parameters` : ""),
    checkpointPassParts(first) || "",
    moduleBars(m) || "");
}

/** Mark the parameters whose uses differ from one variant to the next. */
function markDifferences(all) {
  const names = new Set(all.filter(Boolean).flatMap((rows) => Object.keys(rows)));
  for (const name of names) {
    const uses = new Set(all.filter(Boolean).map((rows) => (rows[name] ? rows[name].uses : "—")));
    if (uses.size < 2) continue;
    for (const row of document.querySelectorAll(`tr[data-param="${CSS.escape(name)}"]`)) {
      row.classList.add("differs");
      row.title = "the variants differ here";
    }
  }
}

Promise.all(cards.map(load)).then((all) => {
  markDifferences(all);
  shareScale(document); // one scale: a shorter bar is fewer bytes in every column
});
