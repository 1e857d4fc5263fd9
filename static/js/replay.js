// The backward replay: step s of N means the first s nodes of event.order have run. An edge
// (source -> target) carries the gradient that `target`'s backward computes for its input, so
// it is known once its target has run; edges into an output root carry the seed gradient.

import { fill, h } from "./dom.js";
import { lineLabel } from "./lines.js";

export function replayState(event, step) {
  if (step === null || step === undefined || !event || event.kind !== "backward") return null;
  const order = event.order;
  const s = Math.max(0, Math.min(step, order.length));
  const ran = new Set(order.slice(0, s));
  const outputs = new Set(event.graph.nodes.filter((n) => n.kind === "output").map((n) => n.id));
  const current = s > 0 ? order[s - 1] : null;
  const doneEdges = new Set();
  const newEdges = new Set();
  for (const e of event.graph.edges) {
    const id = `e-${e.source}-${e.target}-${e.slot}`;
    if (e.target === current) newEdges.add(id);
    else if (ran.has(e.target) || outputs.has(e.target)) doneEdges.add(id);
  }
  const done = new Set([...ran, ...outputs]);
  done.delete(current);
  const pending = new Set(order.slice(s));
  return { step: s, total: order.length, current, done, pending, doneEdges, newEdges };
}

/** The sentence over the graph while it replays; data-step/data-node say the same for programs. */
export function renderReplayStatus(el, event, state, nodes) {
  el.classList.toggle("active", Boolean(state)); // shown over the graph while a replay runs
  el.dataset.step = state ? String(state.step) : "";
  el.dataset.node = state && state.current ? state.current : "";
  if (!state) {
    fill(el, event && event.kind === "backward" ?
      "Replay the backward pass: press → or “next node ▶”." : "The replay needs a backward event.");
    return;
  }
  if (!state.current) {
    fill(el, h("strong", {}, `step 0 of ${state.total}`), ": the gradient starts at the output " +
      (givenSeed(event) ? "from the gradient the script passed (backward(gradient=...), grad_tensors " +
        "or grad_outputs)." : "(d output / d output = 1)."));
    return;
  }
  const n = nodes.get(state.current) || { name: state.current };
  const leaf = n.param || n.label;
  // requires_grad switched off after the forward: its AccumulateGrad runs and adds nothing
  const dropped = (event.dropped || []).includes(leaf);
  fill(el, h("strong", {}, `step ${state.step} of ${state.total}`), ": ",
    h("code", {}, n.name), ` (${n.id})`, n.kind === "param" || n.kind === "leaf" ?
      (dropped ? ` drops its gradient: ${leaf}.requires_grad was switched off after the forward, ` +
        `so ${leaf}.grad is left as it was` : ` adds its gradient into ${leaf}.grad`) :
      n.line ? `, from ${lineLabel(n.line)}` : "",
    state.step === state.total ? " — backward is done." : "");
}

/** Did the script start this pass from a gradient of its own? (A pass autograd-lab ran for a
 *  script with no backward() starts from ones: d output / d output, as said.) */
function givenSeed(event) {
  return !event.synthetic && (event.seed || []).some((s) => s !== null && s !== undefined);
}
