// Presenter mode: the graph and the narration only, in type that reads from the back of a room
// (the graph is drawn in larger type for it: trace_page.js PRESENT_FONT), driven by the
// keyboard. The narration is walked one paragraph ("step") at a time; a step may point at a
// parameter, a node or a source line (its `Show:` line, app/catalog.py), which is selected
// while it is on screen, and the graph opens on that part of it; a parameter's bars are shown
// beside the graph. After the last step, → goes on into the backward replay. The state is the
// view's `present` and `say` (permalink.js), so a class follows it too.

import { fill, h } from "./dom.js";

/** Text with `code` in backticks, as nodes (never innerHTML: see dom.js). */
function inline(text) {
  return text.split("`").map((part, i) => (i % 2 ? h("code", {}, part) : part));
}

/** The view changes that show step `n` (1-based) of `steps`. */
export function stepView(steps, n, { doc, shown, findLine }) {
  const step = steps[n - 1];
  const changes = { say: n, step: null, node: null, param: null, line: null, cell: null };
  if (!step) return changes;
  for (const item of step.show) {
    if (item.param && doc && doc.params[item.param]) {
      changes.param = item.param;
      const node = shown && shown.graph.nodes.find((x) => x.param === item.param);
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

/** Draw the presenter's text box for the view. */
export function renderPresenter(box, steps, view, replay) {
  box.hidden = !view.present;
  document.body.classList.toggle("presenting", Boolean(view.present));
  // a step that names a parameter shows its bars beside the graph (the details panel, large)
  document.body.classList.toggle("presenting-param", Boolean(view.present && view.param));
  if (!view.present) return;
  const n = view.say;
  const step = n ? steps[n - 1] : null;
  const label = step && step.text.match(/^(Question|Answer|What to look at|Try):\s*/i);
  const text = step ? (label ? [h("strong", {}, label[1] + ": "), inline(step.text.slice(label[0].length))] : inline(step.text)) :
    "Presenter mode: → and ← walk the backward replay.";
  const where = replay ? `Replay: step ${replay.step} of ${replay.total}` :
    steps.length ? `Step ${n || 0} of ${steps.length}${n === steps.length ? " · → replays the backward pass" : ""}` : "";
  fill(box.querySelector(".presenter-text"), h("p", {}, text));
  box.querySelector(".presenter-where").textContent = where;
}
