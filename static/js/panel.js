// The details panel for one graph node: what it is, where it came from, what it saved for
// backward, the gradients that flowed through it, and for a custom Function its backward code.

import { checkpointNodeView, checkpointPassParts } from "./checkpoints.js";
import { hooksOnNode } from "./hook_calls.js";
import { nonLeafNote, opNote } from "./op_notes.js";
import { bytesText, h, fmt, shapeText, richText } from "./dom.js";
import { lineLabel, nodeLineLabel } from "./lines.js";
import { moduleBars } from "./memory_bars.js";

/**
 * hooks: {kinds, onLine(n), onNode(id), onReplay(step), diagnostics}
 */
export function nodeView(event, node, hooks) {
  const nodes = new Map(event.graph.nodes.map((n) => [n.id, n]));
  const kind = hooks.kinds[node.kind] || { label: node.kind };
  const body = h("div.node-view", { dataset: { node: node.id } });
  body.append(
    h("h3.op-name", {}, node.name),
    h("p.meta", {}, h(`span.kind-chip.kind-${node.kind}`, {}, kind.label), ` · id ${node.id}`),
  );
  // what its backward does, where op_notes.js knows it; a named non-leaf keeps no .grad
  const note = opNote(node, event);
  if (note) body.append(h("p.op-note", {}, note));
  if (node.kind === "op" && node.label && node.label !== node.name) {
    body.append(h("p.op-note", {}, ...richText(nonLeafNote(`\`${node.label}\``))));
  }
  const facts = [];
  if (node.label && node.label !== node.name) facts.push(["tensor", h("code", {}, node.label)]);
  if (node.param) facts.push(["parameter", h("code", {}, node.param)]);
  if (node.shape) facts.push(["shape", `${shapeText(node.shape)} ${node.dtype || ""}`]);
  if (node.module) facts.push(["module", h("code", {}, node.module)]);
  const calling = node.line ? [h("button.link", { type: "button", onclick: () => hooks.onLine(node.line) },
    lineLabel(node.line)), hooks.lineText && hooks.lineText(node.line) ?
    h("code.line-text", {}, hooks.lineText(node.line).trim()) : ""] : null;
  // an op written in another notebook cell (a model defined earlier): that cell's line, and
  // the traced cell's line that called it
  facts.push(["created at", node.cell_line ? h("span.cell-line", {}, nodeLineLabel(node),
    calling ? [" (called from ", ...calling, ")"] : "") : calling || "— (not a line of the script)"]);
  if (event.order) { // a graph drawn with no pass run through it (a notebook's view) has none
    const step = event.order.indexOf(node.id);
    facts.push(["backward runs it", step >= 0 ? h("button.link", { type: "button", onclick: () => hooks.onReplay(step + 1) },
      `step ${step + 1} of ${event.order.length}`) : node.kind === "output" ? "first: it is where the gradient starts" : "never (not on the path)"]);
  }
  if (node.function) facts.push(["custom Function", h("code", {}, node.function)]);
  if (node.kind === "output" && event.order) facts.push(["gradient it starts from", seedText(event, node)]);
  body.append(kv(facts));
  if (node.compiled_region !== undefined) body.append(compiledRegionView(node.compiled_region, hooks));
  const checkpoint = checkpointNodeView(event, node);
  if (checkpoint) body.append(checkpoint);

  const diags = (hooks.diagnostics || []).filter((d) => (d.nodes || []).includes(node.id) ||
    (node.param && (d.params || []).includes(node.param)));
  if (diags.length) {
    body.append(h("ul.diag-inline", {}, diags.map((d) => h(`li.diag-${d.level}`, {},
      h(`span.badge.badge-${d.level}`, { "aria-hidden": "true" }, d.level === "info" ? "i" : "!"), ...richText(d.message, hooks.onLine)))));
  }

  // the script's hooks the engine ran on this node in this pass, with their call counts
  const ran = hooksOnNode(event, node.id, hooks.onLine);
  if (ran) body.append(ran);

  // Edge source -> target: the gradient of `target`'s input `slot`, computed by target's backward.
  const incoming = event.graph.edges.filter((e) => e.source === node.id);
  const outgoing = event.graph.edges.filter((e) => e.target === node.id);
  if (incoming.length) {
    body.append(h("h4", {}, "Gradient it receives"), edgeTable(incoming, "target", "from", nodes, hooks));
  }
  if (outgoing.length) {
    body.append(h("h4", {}, "Gradients it computes for its inputs"), edgeTable(outgoing, "source", "for", nodes, hooks));
  }
  if (node.saved && node.saved.length) {
    // each allocation once: two saved views of one tensor hold one block of memory
    const sizes = new Map(node.saved.filter((t) => t.storage !== undefined).map((t) => [t.storage, t.bytes]));
    const held = [...sizes.values()].reduce((a, b) => a + b, 0);
    body.append(h("h4", {}, "Saved for backward", sizes.size ? ` (${bytesText(held)})` : ""), h("table.saved", {},
      h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "value or tensor"))),
      h("tbody", {}, node.saved.map((t) => h("tr", {}, h("td", {}, h("code", {}, t.name)),
        h("td", {}, t.packed ? "kept by a saved-tensor hook (a checkpoint's, or the script's own): not read, since reading it runs the hook" :
          t.value !== undefined ? t.value :
          [shapeText(t.shape), t.dtype, t.device].filter(Boolean).join(" "),
        t.bytes !== undefined ? ` · ${bytesText(t.bytes)}` : "",
        t.param ? [" · shares memory with ", h("code", {}, t.param)] : "",
        t.freed ? " · freed after backward" : "",
        t.modified ? (t.saved_version !== undefined
          ? ` · saved at version ${t.saved_version}, now at version ${t.version}: changed in place after it was saved, so this backward cannot use it`
          : " · changed in place after it was saved: this backward cannot use it") :
          t.version ? ` · version ${t.version}: changed in place before it was saved, which does this backward no harm` : ""))))));
  }
  if (node.gradcheck) {
    const ok = node.gradcheck.passed;
    body.append(h(`p.notice.${ok === false ? "notice-warning" : "notice-info"}`, {},
      h("strong", {}, ok === true ? "gradcheck passed" : ok === false ? "gradcheck FAILED" : "gradcheck not run"),
      node.gradcheck.message ? `: ${node.gradcheck.message}` : ""));
  }
  if (node.backward_source) {
    const src = node.backward_source;
    // written in the run's own script: where in it, as the page says lines (a notebook's cell)
    const at = src.file === "<script>" ? lineLabel(src.line) : `${src.file.split("/").pop()}, line ${src.line}`;
    body.append(h("h4", {}, `Its backward (${at})`),
      h("pre.backward-source", {}, h("code", {}, src.source.split("\n").map((text, i) =>
        h("span.bline", { dataset: { n: String(src.line + i) } }, text + "\n")))));
  }
  return body;
}

/** A CompiledFunctionBackward node's region as AOTAutograd cut it (the Trace's compiled_regions):
 *  how many ATen ops each graph has, what the forward saved and what the backward recomputes,
 *  and the two graphs' ops, folded away. */
function compiledRegionView(id, hooks) {
  const region = (hooks.compiledRegions || []).find((r) => r.id === id);
  const box = h("div.compiled-region", { dataset: { region: String(id) } });
  if (!region || !region.forward) {
    box.append(h("p.op-note", {}, `Compiled region ${id}: its graphs were not kept.`));
    return box;
  }
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  box.append(h("h4", {}, "Compiled by AOTAutograd"), h("p.compiled-counts", {}, compiledCounts(region)));
  for (const [label, graph] of [["Forward graph", region.forward], ["Backward graph", region.backward]]) {
    if (!graph) continue;
    box.append(h("details.fx-graph", {}, h("summary", {}, `${label} (${plural(graph.op_count, "op")})`),
      h("ol.fx-ops", {}, graph.ops.map((op) => h("li", {}, h("code", {}, `${op.id} = ${shortOp(op.op)}(${op.inputs.join(", ")})`)))),
      graph.truncated ? h("p.hint", {}, `the first ${graph.ops.length} of ${graph.op_count}`) : ""));
  }
  return box;
}

/** A region's graphs in one sentence: each graph's op count, what the forward saved, what the
 *  backward recomputes (presenter mode says it too: presenter.js). */
export function compiledCounts(region) {
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const names = (list, text) => list.slice(0, 8).map(text).join(", ") + (list.length > 8 ? ", …" : "");
  const parts = [`forward ${plural(region.forward.op_count, "op")}`];
  if (region.backward) {
    const saved = region.saved || [];
    const recomputed = region.recomputed || [];
    const count = region.saved_count ?? saved.length;
    parts.push(`backward ${plural(region.backward.op_count, "op")}`);
    parts.push(`saves ${plural(count, "tensor")}` + (saved.length ? ` (${names(saved, (s) =>
      `${s.name} ${s.shape ? shapeText(s.shape) : ""}`.trim())})` : ""));
    parts.push(`recomputes ${plural(recomputed.length, "op")}` + (recomputed.length ?
      ` (${names(recomputed, (r) => shortOp(r.op))})` : ""));
  } else {
    parts.push("its backward never ran, so AOTAutograd never compiled it");
  }
  return parts.join("; ") + ".";
}

/** aten.addmm.default → addmm; an overload other than the default kept (sum.dim_IntList). */
function shortOp(op) {
  return String(op).replace(/^aten\./, "").replace(/\.default$/, "");
}

/** The gradient a root starts the pass from, as recorded (backward(gradient=...)); autograd's
 *  implicit 1 where none was given. */
function seedText(event, node) {
  const at = Number(String(node.id).replace(/^out/, ""));
  const seed = (event.seed || [])[Number.isInteger(at) ? at : 0];
  if (!event.seed || !seed) return "1, autograd's own start for a single number";
  if (seed.values !== undefined) return h("code", {}, JSON.stringify(seed.values));
  return `${shapeText(seed.shape)} ${seed.dtype} · ‖·‖ ${fmt(seed.norm)}`;
}

/** What one source line made: a list of its nodes, each one click away. */
export function lineView(event, line, hooks) {
  const made = event.graph.nodes.filter((n) => n.line === line);
  const said = lineLabel(line);
  return h("div.line-view", {}, h("h3", {}, said.charAt(0).toUpperCase() + said.slice(1)),
    made.length ? [h("p", {}, `made ${made.length} node${made.length > 1 ? "s" : ""} of this graph (outlined with a dashed line):`),
      h("ul.node-list", {}, made.map((n) => h("li", {}, h("button.link", { type: "button", onclick: () => hooks.onNode(n.id) },
        `${n.name} (${n.id})`), n.module ? ` · ${n.module}` : "")))] :
      h("p", {}, "No node of this graph was created on this line."));
}

function edgeTable(edges, end, word, nodes, hooks) {
  return h("table.edges", {}, h("tbody", {}, edges.map((e) => {
    const other = nodes.get(e[end]) || { name: e[end] };
    return h("tr", {},
      h("td", {}, `${word} `, h("button.link", { type: "button", onclick: () => hooks.onNode(e[end]) },
        `${other.label && other.kind !== "op" ? other.label : other.name} (${e[end]})`), ` · slot ${e.slot}`),
      h("td", {}, shapeText(e.shape)),
      h("td.num", {}, e.grad_norm === null || e.grad_norm === undefined ? "‖·‖ not recorded" : `‖·‖ ${fmt(e.grad_norm)}`));
  })));
}

function kv(rows) {
  return h("table.kv", {}, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

/** Bytes as people read them: 1,234 B, 12.3 kB, 4.5 MB (powers of 1000, as PyTorch's
 *  memory summaries and most tools print them). */

/** What a pass's graph held for backward (the Trace's saved_memory): a line, and the modules
 *  that held the most, as bars; and the allocator's peak in its forward (forward_memory). */
export function savedMemoryParts(ev) {
  const m = ev && ev.saved_memory;
  const forward = forwardMemoryLine(ev);
  if (!m) return forward ? h("div.saved-memory", {}, forward) : null;
  const checkpoints = (ev.graph && ev.graph.checkpoints) || [];
  // what a pack hook keeps is its own; a checkpoint's are said by checkpointPassParts
  const inRegions = ev.graph.nodes.filter((n) => n.checkpoint !== undefined)
    .reduce((sum, n) => sum + (n.saved || []).filter((t) => t.packed).length, 0);
  const others = (m.packed_tensors || 0) - inRegions;
  return h("div.saved-memory", {},
    h("p", { dataset: { held: m.held_bytes, leaf: m.leaf_bytes } },
      h("strong", {}, `Held for backward #${ev.index}: ${bytesText(m.held_bytes)}`),
      checkpoints.length ? " saved by its nodes and kept by its checkpoints (each allocation once)" : " saved by its nodes (each allocation once)",
      m.leaf_bytes ? `, besides ${bytesText(m.leaf_bytes)} of parameters it saved, kept anyway.` : ".",
      others > 0 ? ` ${others} more saved tensor${others > 1 ? "s were" : " was"} taken by a ` +
        "saved-tensor hook, not counted: what the hook keeps is its own." : ""),
    forward || "",
    checkpointPassParts(ev) || "",
    moduleBars(m) || "");
}

/** The most memory the allocator held during the pass's forward, and when backward began,
 *  above the forward's start (app/trace/forward_memory.py), with what measured it. */
function forwardMemoryLine(ev) {
  const f = ev && ev.forward_memory;
  if (!f) return null;
  if (f.unmeasured !== undefined) {
    return h("p.forward-memory", { dataset: { unmeasured: "" } },
      h("strong", {}, "Peak during the forward: not measured"), ` (${f.unmeasured}).`);
  }
  const held = f.held_bytes >= 0 ? bytesText(f.held_bytes) :
    `${bytesText(-f.held_bytes)} less than at its start`;
  const by = f.device === "cuda" ?
    "Measured on the GPU by torch.cuda's allocator counters (max_memory_allocated, memory_allocated); cuBLAS's workspaces were made before the script, so they are not in it." :
    "Measured on the CPU by PyTorch's profiler, from the allocator's reports of every allocation and free in the script's thread.";
  return h("p.forward-memory", { dataset: { peak: f.peak_bytes, held: f.held_bytes, device: f.device } },
    h("strong", {}, `Peak during the forward: ${bytesText(f.peak_bytes)}`),
    ` above its start${f.line ? ` (line ${f.line}, its first recorded operation)` : ""}; ` +
    `held when backward began: ${held}. ` + by +
    " What the forward freed before its backward counts in the peak only.");
}
