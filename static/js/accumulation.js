// A parameter's story in one event. After a backward: one bar per use (the gradient each use
// sent to the parameter's AccumulateGrad), their sum drawn against .grad, and heat maps of .grad
// and of every contribution. After an optimizer step: the weights before and after, and the
// change next to the gradient that caused it.

import { h, fmt, num, shapeText, richText } from "./dom.js";
import { heatmap, maxAbs, colourBar, valueAt, matrix, measure, MAX_VALUES } from "./heatmap.js";
import { gradCompare } from "./grad_compare.js";

export { measure };
import { waterfall } from "./waterfall.js";
import { lineLabel } from "./lines.js";
import { checkSentence, plainRatio, ruleSentences, settingsText } from "./step_rule.js";

const MAP_WIDTH = 150; // two heat maps side by side in the panel

/**
 * The panel body for parameter `name` in `event`.
 * hooks: {cell, onCell(index|null), onHover(nodeId|null), onPickNode(id), onEvent(index), diagnostics,
 *   chartScale (the bars' type, larger in presenter mode)}
 */
export function paramView(doc, event, name, hooks) {
  const info = doc.params[name] || {};
  const body = h("div.param-view", { dataset: { param: name } });
  body.append(
    h("h3.param-name", {}, h("code", {}, name)),
    h("p.meta", {}, [shapeText(info.shape), info.dtype, info.device, info.kind, info.module && `module ${info.module}`]
      .filter(Boolean).join(" · ")),
  );
  const diags = (hooks.diagnostics || []).filter((d) => (d.params || []).includes(name));
  if (diags.length) {
    body.append(h("ul.diag-inline", {}, diags.map((d) =>
      h(`li.diag-${d.level}`, {}, h(`span.badge.badge-${d.level}`, { "aria-hidden": "true" }, d.level === "info" ? "i" : "!"),
        h("span.sr-only", {}, `${d.level}: `), ...richText(d.message, hooks.onLine)))));
  }
  if (event.kind === "step") body.append(stepView(doc, event, name));
  else body.append(backwardView(doc, event, name, hooks));
  return body;
}

function backwardView(doc, event, name, hooks) {
  const out = h("div.accumulation");
  const diags = (hooks.diagnostics || []).filter((d) => (d.params || []).includes(name));
  const contribs = (event.contributions || {})[name] || [];
  const nodes = new Map(event.graph.nodes.map((n) => [n.id, n]));
  // torch.autograd.grad returns a gradient per input and leaves .grad alone: the uses add up
  // to what it returned for this parameter, and that is the total they are held to
  const returns = Array.isArray(event.inputs);
  if (returns && !event.inputs.includes(name)) {
    out.append(h("p.notice", {}, `torch.autograd.grad at ${event.line ? lineLabel(event.line) : "line ?"} was not asked for this parameter: it returns gradients for its inputs only, and `,
      h("code", {}, ".grad"), " is left as it was."));
    return out;
  }
  const grads = returns ? { before: null, after: (event.results || [])[event.inputs.indexOf(name)] || null }
    : (event.grads || {})[name] || { before: null, after: null };
  const totalName = returns ? "what autograd.grad returned" : ".grad after backward";
  // .grad changed with no use in this pass's graph: a backward torch ran inside it added to it
  const inner = !contribs.length && (event.inner || []).includes(name);
  if (inner) {
    out.append(h("p.notice.notice-info.inner-pass", {}, "Its gradient came through a backward that torch ran " +
      `inside backward #${event.index}` + (event.nested ? " (a reentrant checkpoint recomputes its forward and runs a " +
      "backward of its own)" : "") + ": its uses there are not drawn one by one, and ", h("code", {}, ".grad"),
      " changed by what that backward added."));
  } else if (!contribs.length) {
    out.append(h("p.notice.notice-warning", {}, `Not used in backward #${event.index}: no gradient reaches it, so `,
      h("code", {}, ".grad"), grads.after ? " keeps its earlier value." : " stays None."));
    if (!grads.after) return withCompare(out, doc, event, name, hooks);
  }
  const cell = hooks.cell && grads.after && valueAt(grads.after, hooks.cell) !== null ? hooks.cell : null;
  const what = cell ? `entry [${cell.join(", ")}]` : "sum of all entries";
  // requires_grad switched off after the forward: AccumulateGrad dropped what the uses sent
  const dropped = (event.dropped || []).includes(name);
  if (dropped) {
    out.append(h("p.notice.notice-warning.dropped", {}, "Autograd dropped this gradient: ",
      h("code", {}, "requires_grad"), " was switched off after the forward pass and before this backward, " +
      "so what its uses sent never reached ", h("code", {}, ".grad"), grads.before ? ", which kept its earlier value." : ", which stayed None."));
  }
  out.append(h("p.lead-in", {}, inner ? "No use of it in this pass's own graph." :
    dropped ? `Used ${contribs.length === 1 ? "once" : `${contribs.length} times`} in the forward pass; nothing of it was added.` :
    contribs.length === 1 ? "Used once: its gradient is one contribution." :
      `Used ${contribs.length} times: each use sends its own gradient, and `,
  inner || dropped || contribs.length === 1 ? "" : (returns ? "what autograd.grad returns" : h("code", {}, ".grad")),
  inner || dropped || contribs.length === 1 ? "" :
    // AccumulateGrad adds onto a .grad an earlier pass left, and a hook's change is its own
    (grads.before ? " is what it held before plus their sum" : " is their sum") +
    (((event.hooks || {})[name] || []).length ? ", with its hooks' change." : ".")));
  out.append(h("div.measure", { role: "radiogroup", "aria-label": "What each bar measures" },
    h("span", {}, "Bars show: "),
    radio("measure", "sum", !cell, "the sum of all entries", () => hooks.onCell(null)),
    radio("measure", "entry", Boolean(cell), cell ? `entry [${cell.join(", ")}]` : "one entry (click a heat-map cell)",
      () => { if (!cell) hooks.onCell(firstIndex(grads.after)); }, !matrix(grads.after))));

  const rows = [];
  if (grads.before) rows.push({ kind: "before", label: ".grad before this backward", value: measure(grads.before, cell) });
  contribs.forEach((c, i) => {
    const n = nodes.get(c.node) || { name: c.node };
    const label = `use ${i + 1}: from ${n.name} (${c.node})${n.line ? `, ${lineLabel(n.line)}` : ""}`;
    if (dropped) return;  // never reached .grad: listed below, not drawn as adding up to it
    rows.push({ kind: "use", node: c.node, value: measure(c.grad, cell), label });
  });
  if (dropped) {
    out.append(h("p.hint.dropped-uses", {}, "What the uses sent, dropped: ", contribs.map((c, i) =>
      `use ${i + 1} from ${(nodes.get(c.node) || { name: c.node }).name} (${c.node}): ${fmt(measure(c.grad, cell), 6)}`).join("; "), "."));
  }
  // what the script's hooks on this leaf changed: a share of its own, so the bars add up
  const shares = ((event.hooks || {})[name] || []);
  shares.forEach((s) => {
    rows.push({ kind: "hook", value: measure(s.grad, cell), label: hookLabel(s, returns) });
  });
  if (inner) {
    rows.push({ kind: "hook", label: "added by the backward inside this one",
      value: measure(grads.after, cell) - (grads.before ? measure(grads.before, cell) : 0) });
  }
  const total = measure(grads.after, cell);
  rows.push({ kind: "total", label: totalName, value: total });
  out.append(waterfall(rows, { onHover: hooks.onHover, onPick: hooks.onPickNode, scale: hooks.chartScale || 1 }));

  const sum = rows.filter((r) => r.kind !== "total").reduce((a, r) => a + r.value, 0);
  // NaN is never equal to itself: both sides NaN is a NaN that reached .grad, not a difference
  const bothNaN = Number.isNaN(sum) && Number.isNaN(total);
  const close = bothNaN || Math.abs(sum - total) <= 1e-5 * Math.max(1, Math.abs(total));
  out.append(h("p.check", { dataset: { sum: String(sum), grad: String(total) } },
    h("span.check-mark", { "aria-hidden": "true" }, bothNaN ? "! " : close ? "✓ " : "✗ "),
    `${dropped ? (grads.before ? ".grad before" : "nothing added") : inner ? `${grads.before ? ".grad before + " : ""}what the inner backward added` : `${grads.before ? ".grad before + " : ""}${contribs.length > 1 ? "Σ uses" : "the use"}`}${shares.length ? " + the hooks' share" : ""} = ${fmt(sum, 6)}; `,
    returns ? "what autograd.grad returned" : h("code", {}, ".grad"),
    grads.after ? [` ${what} = `, h("strong.grad-value", {}, fmt(total, 6))] : [" is ", h("strong.grad-value", {}, "None")],
    bothNaN ? " — both are NaN: a NaN reached it through these uses." :
      close ? " — they agree." :
        diags.length ? " — they differ (see the note above)." :
          ` — they differ by ${fmt(total - sum, 3)}, and autograd-lab does not know why.`));

  // .grad after this pass next to after another one: what the passes between added, or cleared
  if (!returns) withCompare(out, doc, event, name, hooks);

  const tensors = [grads.after, grads.before, ...contribs.map((c) => c.grad), ...shares.map((s) => s.grad)];
  const scale = maxAbs(...tensors);
  if (matrix(grads.after)) {
    const maps = h("div.heatmaps");
    const pick = (index) => hooks.onCell(index);
    const size = { maxWidth: MAP_WIDTH, onCell: pick, picked: cell, scale };
    maps.append(heatmap(grads.after, { title: totalName, ...size }));
    if (grads.before) maps.append(heatmap(grads.before, { title: ".grad before", ...size }));
    contribs.forEach((c, i) => maps.append(heatmap(c.grad, { title: `use ${i + 1} (${c.node})`, ...size })));
    shares.forEach((s) => maps.append(heatmap(s.grad, { title: hookLabel(s, returns), ...size })));
    out.append(h("h4", {}, "Heat maps, one colour scale"), colourBar(scale), maps);
  } else if (grads.after) {
    out.append(h("p.hint", {}, grads.after.numel > MAX_VALUES ?
      `Too large to draw as a heat map (${grads.after.numel} values).` :
      "Its values were not kept: a run keeps a budget of numbers (a big model's first ones) and the statistics of every tensor. See “What to notice”."));
  }
  const steps = doc.events.filter((e) => e.kind === "step" && e.index > event.index && (e.params || {})[name]);
  if (steps.length) {
    out.append(h("p.next-step", {}, "Then: ", steps.slice(0, 3).map((e) =>
      h("button.link", { type: "button", onclick: () => hooks.onEvent(e.index) },
        `step #${e.index} (${e.optimizer}): weights before and after`))));
  }
  return out;
}

function withCompare(out, doc, event, name, hooks) {
  const compare = gradCompare(doc, event, name, hooks);
  if (compare) out.append(compare);
  return out;
}

/** "hook at line 6": what a hook on the leaf added (or took away) on the way into .grad, or
 *  into what torch.autograd.grad returned (`returns`), which runs the hook and fills no .grad. */
function hookLabel(share, returns = false) {
  const where = share.lines && share.lines.length ? ` at ${share.lines.map(lineLabel).join("; ")}` : "";
  if (share.kind === "hook") return `hook${where}: its change ${returns ? "to what autograd.grad returned" : "on the way into .grad"}`;
  if (share.kind === "module backward hook") return `module hook${where}: its change to grad_input`;
  return `post-accumulate-grad hook${where}: its change to .grad`;
}

function stepView(doc, event, name) {
  const out = h("div.step-view");
  const p = (event.params || {})[name];
  if (!p) {
    out.append(h("p.notice.notice-warning", {}, `Step #${event.index} did not change this parameter ` +
      "(it has no gradient, or the optimizer does not hold it)."));
    return out;
  }
  const change = difference(p.after, p.before);
  const [lead, ...details] = ruleSentences(event, p);
  out.append(h("p.lead-in", {}, lead));
  details.forEach((d) => out.append(h("p.step-rule", {}, d)));
  const check = checkSentence(event, p);
  if (check) {
    out.append(h(`p.check${check[0] === "✗" ? ".check-differs" : ""}`, {},
      check[0] ? h("span.check-mark", { "aria-hidden": "true" }, `${check[0]} `) : "", check[1]));
  }
  const changeNorm = change ? change.norm : num((p.check || {}).observed_change_norm);
  const rows = [
    ["‖weights‖ before", fmt(p.before.norm, 6)],
    ["‖weights‖ after", fmt(p.after.norm, 6)],
    ["‖change‖", Number.isFinite(changeNorm) ? fmt(changeNorm, 6) : "?"],
    ["‖.grad‖", p.grad ? fmt(p.grad.norm, 6) : "None"],
  ];
  const ratio = plainRatio(event, p, changeNorm);
  if (ratio !== null) rows.push(["‖change‖ / ‖.grad‖", `${fmt(ratio, 4)} (lr = ${fmt(event.settings[p.group ?? 0].lr)})`]);
  const settings = settingsText((event.settings || [])[p.group ?? 0]);
  if (settings) rows.push(["settings", settings]);
  out.append(h("table.kv", {}, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v))))));
  const scale = maxAbs(p.before, p.after);
  if (matrix(p.before)) {
    out.append(h("h4", {}, "Weights before and after, one colour scale"), colourBar(scale),
      h("div.heatmaps", {}, heatmap(p.before, { title: "before the step", scale, maxWidth: MAP_WIDTH }),
        heatmap(p.after, { title: "after the step", scale, maxWidth: MAP_WIDTH })));
    const dscale = maxAbs(change, p.grad);
    out.append(h("h4", {}, "The change and the gradient, one colour scale"), colourBar(dscale),
      h("div.heatmaps", {}, heatmap(change, { title: "after − before", scale: dscale, maxWidth: MAP_WIDTH }),
        heatmap(p.grad, { title: ".grad used by the step", scale: dscale, maxWidth: MAP_WIDTH })));
  }
  return out;
}

/** after − before as a summary with values (both must carry values). */
function difference(after, before) {
  const a = matrix(after);
  const b = matrix(before);
  if (!a || !b || a.data.length !== b.data.length) return null;
  const data = a.data.map((v, i) => v - b.data[i]);
  const shape = after.shape;
  return { shape, numel: data.length, values: nest(data, shape),
    min: Math.min(...data), max: Math.max(...data), norm: Math.hypot(...data) };
}

function nest(flat, shape) {
  if (shape.length <= 1) return shape.length === 0 ? flat[0] : flat;
  const size = flat.length / shape[0];
  return Array.from({ length: shape[0] }, (_, i) => nest(flat.slice(i * size, (i + 1) * size), shape.slice(1)));
}

function firstIndex(summary) {
  return (summary && summary.shape ? summary.shape.map(() => 0) : null);
}

function radio(name, value, checked, label, onchange, disabled = false) {
  return h("label.radio", {}, h("input", { type: "radio", name, value, checked, disabled, onchange }), " ", label);
}

