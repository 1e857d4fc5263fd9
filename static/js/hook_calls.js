// The script's hooks that ran in one backward pass (event.hook_calls, app/trace/hooks.py): how
// many times each was called and whether it returned a new gradient or None, in the event's
// notice and on the node each ran on.

import { h } from "./dom.js";
import { lineLabel } from "./lines.js";

const times = (n) => (n === 1 ? "once" : n === 2 ? "twice" : `${n} times`);

/** "called twice; returned None each time (it only looked, unless it changed a tensor in
 *  place)" — what the counts say, and no more. */
function callText(c) {
  const returned = c.returned === 0 ? (c.calls === 1 ? "returned None" : "returned None each time") :
    c.returned === c.calls ? (c.calls === 1 ? "returned a new gradient" : "returned a new gradient each time") :
      `returned a new gradient ${times(c.returned)}, None otherwise`;
  return `called ${times(c.calls)} in this pass; ${returned}`;
}

/** "tensor hook on `h` (line 6)" with the line a link. */
function hookName(c, onLine) {
  return [c.kind, c.on ? [" on ", h("code", {}, c.on)] : "",
    c.line ? [" (registered at ", h("button.link", { type: "button", onclick: () => onLine(c.line) },
      lineLabel(c.line)), ")"] : ""];
}

/** The event's line: "3 hooks ran in backward #0: …". Null when none ran. */
export function hookCallsParts(ev, onLine) {
  const calls = (ev && ev.hook_calls) || [];
  if (!calls.length) return null;
  const head = `${calls.length === 1 ? "1 hook" : `${calls.length} hooks`} of the script ran in ${ev.kind} #${ev.index}` +
    (ev.call === "torch.autograd.grad" ? " (torch.autograd.grad accumulates into no .grad, so no post-accumulate-grad hook runs)" : "") + ": ";
  return [h("strong", {}, head), calls.map((c, i) => [i ? "; " : "",
    ...hookName(c, onLine), `, ${times(c.calls)}`, c.returned ? " (returned a gradient)" : ""])];
}

/** The hooks that ran on `nodeId` in this pass, for the node panel; null when none did. */
export function hooksOnNode(event, nodeId, onLine) {
  const calls = (event.hook_calls || []).filter((c) => (c.nodes || []).includes(nodeId));
  if (!calls.length) return null;
  return h("div.hook-calls", {}, h("h4", {}, "Hooks that ran on it in this pass"),
    h("ul.hook-call-list", {}, calls.map((c) => h("li.hook-call", {
      dataset: { kind: c.kind, calls: String(c.calls), returned: String(c.returned) },
    }, ...hookName(c, onLine), ": ", callText(c),
    c.sits_on ? `. A legacy module hook sits here, on ${c.sits_on}, the operation that made the module's output: its grad_input is this node's.` : ""))));
}

/** How many of the script's hooks ran on each node: the drawing's small marker. */
export function hookCounts(event) {
  const out = new Map();
  for (const c of (event && event.hook_calls) || []) {
    for (const n of c.nodes || []) out.set(n, (out.get(n) || 0) + 1);
  }
  return out;
}
