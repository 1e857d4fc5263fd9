// The message line above the layout: what went wrong with a run, in words a person can act on,
// or what the run itself reports (the script failed; it never called backward).

import { ApiError, FormatError } from "./api.js";
import { fill, h, richText } from "./dom.js";
import { hookCallsParts } from "./hook_calls.js";
import { lineLabel } from "./lines.js";

export function setStatus(el, message, level = "info") {
  if (!message) {
    el.replaceChildren();
    el.className = "status";
    return;
  }
  el.className = `status notice notice-${level}`;
  el.setAttribute("role", level === "error" ? "alert" : "status");
  fill(el, Array.isArray(message) ? message : richText(message));
}

/** An error from loading a run, as the sentence to show. */
export function explain(err) {
  if (err instanceof FormatError) return err.message;
  if (err instanceof ApiError && err.status === 422 && /device/i.test(err.message)) {
    return `${err.message} Choose another device in the “device” menu.`;
  }
  if (err instanceof ApiError) return err.message;
  return `Something went wrong in the page: ${err.message}`;
}

/** [parts, level] saying what the Trace itself reports, or [null] when all went as planned. */
export function runReport(doc, { onLine }) {
  const parts = [];
  const err = doc.error;
  if (err) {
    parts.push(errorHeadline(err, onLine));
    const ex = err.explanation;
    if (ex && ex.code !== "unrecognised") parts.push(explanationParts(ex, onLine));
  }
  const synthetic = doc.events.find((e) => e.synthetic);
  if (synthetic) {
    if (parts.length) parts.push(h("br"));
    parts.push(h("strong", {}, "This script never calls backward(): "),
      ...richText(synthetic.synthetic_reason || "the graph shown is that of its last output tensor.", onLine));
  }
  return [parts.length ? parts : null, err ? "error" : "info"];
}

// error types that are not the script's: the run was stopped, or the server could not start it
// (app/web/runs/queue.py, app/runner/explain.py)
const NOT_THE_SCRIPTS = {
  Stopped: "Stopped",
  ServerBusy: "The server could not run this script",
  ServerError: "The server could not run this script",
};

/** How a run's error is said: "The script stopped with ValueError at line 6: ...", but a stop
 *  or a server's failure in words of its own (its message says where, as a line button). */
export function errorHeadline(err, onLine) {
  const own = NOT_THE_SCRIPTS[err.type];
  if (own) return [h("strong", {}, own), ": ", ...richText(err.message, onLine)];
  return [h("strong", {}, `The script stopped with ${err.type}`),
    err.line ? [" at ", h("button.link", { type: "button", onclick: () => onLine(err.line) }, lineLabel(err.line))] : "",
    ": ", ...richText(err.message, onLine)];
}

/** An autograd failure explained: what happened, where (a button to the line), the fix as
 *  the script's changed lines, and the scenario that teaches it. */
export function explanationParts(ex, onLine) {
  const fix = ex.fix;
  return h("div.explanation", { "data-code": ex.code },
    h("p", {}, h("strong", {}, "What happened: "), ...richText(ex.what || "", onLine)),
    ex.line ? h("p", {}, h("strong", {}, "Where: "),
      h("button.link", { type: "button", onclick: () => onLine(ex.line) }, lineLabel(ex.line)),
      ex.nodes.length ? ` (and the node${ex.nodes.length > 1 ? "s" : ""} marked in the graph)` : "") : "",
    fix ? h("p.explanation-fix-say", {}, h("strong", {}, fixLabel(fix)), ...richText(fix.say, onLine)) : "",
    fix ? h("p.fix-tried", {}, fixTried(fix)) : "",
    fix && fix.edits.length ? h("pre.explanation-fix", {}, fix.edits.map((e) =>
      `${lineLabel(e.line)}\n- ${e.before}\n${e.after.split("\n").map((l) => `+ ${l}`).join("\n")}\n`).join("\n")) : "",
    ex.scenario ? h("p", {}, h("strong", {}, "The scenario that shows it: "),
      h("a.explanation-scenario", { href: `/scenarios/${encodeURIComponent(ex.scenario)}` }, ex.scenario.replaceAll("_", " "))) : "");
}

/** "Fix: " only for a fix that was run and got the script to the end (app/runner/fix_trial.py). */
function fixLabel(fix) {
  const t = fix.tried;
  return t && t.ran && !t.error ? "Fix: " : "Suggested change: ";
}

/** What happened when the fix was run, in one sentence; or that it was not. */
function fixTried(fix) {
  const t = fix.tried;
  if (!fix.edits.length) return "Not run: it is advice, not an edit of the script.";
  if (!t) return "Not run here: autograd-lab has not checked that this change works.";
  if (!t.ran) return `Not run: ${t.why || "it could not be applied"}.`;
  if (t.error) return `Tried: with this change the script still stopped, with ${t.error}` +
    (t.message ? `: ${t.message}` : ".");
  return `Verified: the script ran to the end with this change` +
    (t.backwards ? ` (${t.backwards} backward pass${t.backwards === 1 ? "" : "es"}).` : ".");
}

/** A backward or step that raised is still an event: say so above the graph. A pass that
 *  stands for the script's gradcheck says the check's verdict there too. */
export function renderEventNotice(box, ev, { onLine }) {
  const err = ev && ev.error;
  const check = ev && ev.gradcheck;
  const roots = ev && ev.kind === "backward" && !err ? rootsNote(ev, onLine) : null;
  const hooked = hookCallsParts(ev, onLine);
  box.hidden = !err && !check && !roots && !hooked;
  if (box.hidden) return;
  const level = err ? "error" : check && !check.passed ? "warning" : "info";
  box.className = `notice notice-${level} event-notice`;
  box.setAttribute("role", level === "info" ? "status" : "alert");
  fill(box, check ? gradcheckParts(check, onLine) : "", check && err ? h("br") : "",
    err ? [h("strong", {}, `${ev.kind} #${ev.index} failed with ${err.type}`),
      ev.line ? [" at ", h("button.link", { type: "button", onclick: () => onLine(ev.line) }, lineLabel(ev.line))] : "",
      ": ", ...richText(err.message, onLine)] : "",
    roots && !check ? h("span.roots-line", {}, roots) : "",
    hooked && (check || err || roots) ? h("br") : "", hooked ? h("span.hook-calls-line", {}, hooked) : "");
}

/** A backward started from several roots at once (`torch.autograd.backward([l1, l2])`): one
 *  walk of the graph in which what reaches each leaf is the sum over the roots, so `.grad` ends
 *  as one backward() per root would leave it (tests/trace/test_roots_and_calls.py checks that
 *  against PyTorch). Not for autograd.grad, which leaves `.grad` alone. */
function rootsNote(ev, onLine) {
  const roots = ev.graph.nodes.filter((n) => n.kind === "output").length;
  if (roots < 2 || ev.gradcheck || ev.call === "torch.autograd.grad") return null;
  return [h("strong", {}, `One pass from ${roots} roots`),
    ev.line ? [" at ", h("button.link", { type: "button", onclick: () => onLine(ev.line) }, lineLabel(ev.line))] : "",
    `: the engine walks the graph once, and what reaches each leaf is the sum over the ${roots} roots, so `,
    h("code", {}, ".grad"), " ends as one backward() per root would leave it (to rounding), in one pass instead of " +
    `${roots}.`];
}

// 1e-06 as "1e-6", not "0.000001"; 0.001 as it is
const tolerance = (x) => (x !== 0 && Math.abs(x) < 1e-4 ? x.toExponential() : String(x));

/** "gradcheck at line 17: passed (eps 1e-6, atol 1e-5, rtol 0.001)", as text: the function's
 *  name and the message are the script's. */
function gradcheckParts(c, onLine) {
  const used = ["eps", "atol", "rtol"].filter((k) => typeof c[k] === "number")
    .map((k) => `${k} ${tolerance(c[k])}`).join(", ");
  return [h("strong", {}, c.check),
    c.line ? [" at ", h("button.link", { type: "button", onclick: () => onLine(c.line) }, lineLabel(c.line))] : "",
    `: ${c.passed ? "passed" : "failed"}`, c.calls > 1 ? ` ${c.calls} times` : "", used ? ` (${used})` : "",
    c.passed ? "." : `: ${c.message}.`,
    ` This graph is one representative pass of ${c.function}: run once on copies of its inputs, `
      + "with torch.autograd.grad back to them (the check's own passes inside torch are not drawn)."];
}
