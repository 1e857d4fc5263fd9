// The notebook widget (autograd_lab/widget.py, through anywidget): the run page's own graph view,
// node details, parameter accumulation bars and heat maps, and backward replay, from the same
// modules the page imports (graph.js, panel.js, accumulation.js, replay.js). The kernel sends the
// Trace gzipped, its first backward pass drawn by graphviz, the page's stylesheet and
// svg-pan-zoom; the widget draws inside a shadow root, so the page's styles stay its own. Where
// the kernel has no `dot`, it sends the DOT and the vendored graphviz-in-WebAssembly instead,
// and the drawing is laid out here (browser_layout.js).

import { loadGraphviz, layoutSvg } from "./browser_layout.js";
import { renderDiagnostics } from "./diagnostics.js";
import { fill, h } from "./dom.js";
import { GraphView } from "./graph.js";
import { setScript } from "./lines.js";
import { nodeView } from "./panel.js";
import { paramView } from "./accumulation.js";
import { renderReplayStatus, replayState } from "./replay.js";

async function inflateText(bytes) {
  const view = bytes instanceof DataView ? bytes : new DataView(bytes.buffer || bytes);
  const stream = new Blob([view]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).text();
}

const inflate = async (bytes) => JSON.parse(await inflateText(bytes));

/** The kernel's drawing, or the one laid out here from its DOT where the kernel has no dot. */
async function drawing(model, say) {
  if (model.get("svg") || !model.get("dot")) return model.get("svg");
  say("Laying the graph out in the browser (the kernel has no graphviz)…");
  const graphviz = await loadGraphviz(await inflateText(model.get("graphviz_gz")));
  return layoutSvg(graphviz, model.get("dot"));
}

/** svg-pan-zoom is a classic script that sets window.svgPanZoom: run it once per page. */
function panZoomLoaded(source) {
  if (window.svgPanZoom || !source) return;
  const script = document.createElement("script");
  script.textContent = source;
  document.head.append(script);
}

/** The kernel shows a graph twice: a static output (the picture as HTML and SVG, which a saved
 *  notebook reopened without its kernel still shows) and this live view. While the view runs,
 *  its static twin is hidden, by a rule on the page (JupyterLab redraws outputs scrolled away:
 *  a rule outlives them), so that the graph is seen once. */
function hideStaticTwin(id) {
  if (!/^[0-9a-f]{32}$/.test(id || "")) return;
  const style = document.createElement("style");
  style.dataset.autogradLabStatic = id;
  style.textContent = `.jp-OutputArea-child:has([data-autograd-lab-static="${id}"]) { display: none; }`;
  document.head.append(style);
}

async function render({ model, el }) {
  panZoomLoaded(model.get("pan_zoom_js"));
  hideStaticTwin(model.get("static_id"));
  const root = el.attachShadow ? el.attachShadow({ mode: "open" }) : el;
  const style = document.createElement("style");
  style.textContent = model.get("css");
  const graphBox = h("div.graph.widget-graph", { tabindex: "0", "aria-label": "Backward graph" });
  const status = h("p.replay-status", { "aria-live": "polite" }); // over the graph, as on the page
  const title = h("h2.widget-details-title", {}, "Details");
  const details = h("div.widget-details-body");
  // the page's replay buttons (templates/trace.html), with its words
  const buttons = {
    first: h("button#replay-first", { type: "button", title: "Back to the start", "aria-label": "Replay: start" }, "«"),
    prev: h("button#replay-prev", { type: "button", title: "Previous node", "aria-label": "Replay: previous node" }, "◀ back"),
    next: h("button#replay-next", { type: "button", title: "Next node", "aria-label": "Replay: next node" }, "next node ▶"),
    last: h("button#replay-last", { type: "button", title: "To the end", "aria-label": "Replay: end" }, "»"),
    stop: h("button#replay-stop", { type: "button", title: "Leave the replay" }, "stop"),
  };
  const controls = h("div.replay-controls", { role: "group", "aria-label": "Backward replay" }, Object.values(buttons));
  // every finding of the cell, of every event (the page's "What to notice", diagnostics.js)
  const findingsList = h("ul.widget-findings-list");
  const findings = h("section.diagnostics.widget-findings", { "aria-label": "Findings", hidden: true },
    h("h2", {}, "What to notice"), findingsList);
  const link = model.get("link");
  root.append(style, h("div.autograd-lab-widget", {},
    h("p.widget-summary", {}, model.get("summary"),
      link ? [" · ", h("a", { href: link, target: "_blank", rel: "noopener" }, "open the run on its server")] : null),
    findings, controls,
    h("div.widget-body", {}, h("div.graph-box", {}, graphBox, status),
      h("aside.widget-details", {}, title, details))));

  const doc = await inflate(model.get("trace_gz"));
  setScript(doc.script); // a notebook's lines are said as its cells'
  let pick = () => {}; // a finding's "show": set once the graph is drawn
  renderDiagnostics(findings, findingsList, doc.diagnostics || [], { onPick: (d) => pick(d), onLine: null });
  // a view (show(tensor): the graph make_dot walks) has no pass: nothing to replay or sum
  const viewIndex = model.get("view");
  const shownView = viewIndex === null || viewIndex === undefined ? null : (doc.views || [])[viewIndex];
  const event = shownView ? { index: null, kind: "view", graph: shownView.graph } :
    doc.events.find((e) => e.index === model.get("event"));
  if (shownView) controls.remove();
  const kinds = model.get("kinds");
  let svg = "";
  if (event) {
    try {
      svg = await drawing(model, (text) => fill(details, h("p.hint", {}, text)));
    } catch (err) {
      fill(details, h("p.hint", {}, `The graph could not be laid out in the browser: ${err.message}`));
      graphBox.hidden = true;
      return;
    }
  }
  if (!svg) {
    fill(details, h("p.hint", {}, model.get("summary")));
    graphBox.hidden = true;
    return;
  }
  const byId = new Map(event.graph.nodes.map((n) => [n.id, n]));
  const view = { node: null, param: null, step: null, cell: null };
  const graph = new GraphView(graphBox, {
    onNode: (id) => {
      const node = byId.get(id);
      update({ node: id, param: !shownView && node && node.param && doc.params[node.param] ? node.param : null });
    },
    onBackground: () => update({ node: null, param: null }),
  });
  const hooks = {
    kinds, diagnostics: doc.diagnostics, chartScale: 1, compiledRegions: doc.compiled_regions,
    lineText: () => "", onLine: () => {}, onEvent: () => {},
    onNode: (id) => update({ node: id, param: null }),
    onReplay: (step) => update({ step }),
    onHover: () => {}, onPickNode: (id) => update({ node: id, param: null }),
  };

  function update(change) {
    setScript(doc.script); // lines.js keeps one cell map per page: another widget's may be there
    Object.assign(view, change);
    const state = replayState(event, view.step);
    const contrib = new Map();
    ((event.contributions || {})[view.param] || []).forEach((c, i) => {
      contrib.set(c.node, contrib.has(c.node) ? `${contrib.get(c.node)},${i + 1}` : String(i + 1));
    });
    graph.apply({ selected: view.node, replay: state, contrib });
    renderReplayStatus(status, event, state, byId);
    const node = byId.get(view.node) || (state && state.current ? byId.get(state.current) : null);
    if (view.param) {
      title.textContent = "Parameter: where .grad comes from";
      fill(details, paramView(doc, event, view.param, { ...hooks, cell: view.cell,
        onCell: (cell) => update({ cell }) }));
    } else if (node) {
      title.textContent = view.node ? "Node" : `Replay step ${state.step}: running now`;
      fill(details, nodeView(event, node, hooks));
    } else {
      title.textContent = "Details";
      fill(details, h("p.hint", {}, shownView ?
        "Click a node in the graph: what it computes, what it saved, where it was made. This graph " +
        "was drawn without a backward pass; run one under %%autograd_lab to see .grad summed." :
        "Click a node in the graph (a parameter shows how its .grad is summed from its uses), " +
        "or replay the backward pass."));
    }
    buttons.stop.disabled = view.step === null;
    if (state && state.current) graph.revealNow(state.current);
  }
  // a finding's parameter or first node, where the drawn graph has it
  pick = (d) => {
    const param = (d.params || []).find((p) => !shownView && doc.params[p]);
    const node = (d.nodes || []).find((id) => byId.has(id));
    if (param) update({ param, node: null });
    else if (node) { update({ node, param: null }); graph.revealNow(node); }
  };
  buttons.first.onclick = () => update({ step: 0, node: null });
  buttons.prev.onclick = () => update({ step: Math.max(0, (view.step ?? 1) - 1), node: null });
  buttons.next.onclick = () => update({ step: Math.min(event.order.length, (view.step ?? 0) + 1), node: null });
  buttons.last.onclick = () => update({ step: event.order.length, node: null });
  buttons.stop.onclick = () => update({ step: null });
  graph.show(svg, event, doc.diagnostics);
  graph.resized();
  update({});
  return () => graph.destroy();
}

export default { render };
