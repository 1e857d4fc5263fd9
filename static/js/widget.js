// The notebook widget (autograd_lab/widget.py, through anywidget): the run page's own graph view,
// node details, parameter accumulation bars and heat maps, and backward replay, from the same
// modules the page imports (graph.js, panel.js, accumulation.js, replay.js). The kernel sends the
// Trace gzipped, its first backward pass drawn by graphviz, the page's stylesheet and
// svg-pan-zoom; the widget draws inside a shadow root, so the page's styles stay its own. Where
// the kernel has no `dot`, it sends the DOT and the vendored graphviz-in-WebAssembly instead,
// and the drawing is laid out here (browser_layout.js), then sent back to be the cell's
// static picture (keepPicture).

import { loadGraphviz, layoutSvg } from "./browser_layout.js";
import { renderDiagnostics } from "./diagnostics.js";
import { fill, h } from "./dom.js";
import { GraphView } from "./graph.js";
import { lineLabel, setScript } from "./lines.js";
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

// the box the graph is drawn in: as tall as the drawing at labels of BOX_LABEL px (a small
// graph's box shrinks to it), never below BOX_MIN px nor above BOX_MOST of the window
const BOX_LABEL = 12;
const BOX_MIN = 220;
const BOX_MOST = 0.8;
// the opening view shows the loss and the parameters whole at labels of at least OPEN_FLOOR px
// when they fit at that; else the loss (the graph's output, where backward starts) first
const OPEN_FLOOR = 7;
const OPEN_COMFY = 13;

/** The drawing's size in its own units, from graphviz's viewBox. */
function drawingSize(svgText) {
  const m = /viewBox="\s*[-\d.]+[\s,]+[-\d.]+[\s,]+([\d.]+)[\s,]+([\d.]+)/.exec(svgText.slice(0, 2000));
  return m ? { w: parseFloat(m[1]), h: parseFloat(m[2]) } : null;
}

async function render({ model, el }) {
  panZoomLoaded(model.get("pan_zoom_js"));
  hideStaticTwin(model.get("static_id"));
  // JupyterLab's keyboard shortcuts (arrows move between cells) leave the widget's keys alone
  el.setAttribute("data-lm-suppress-shortcuts", "true");
  // ...so Esc hands the keyboard back: the focus goes to this output's cell, which JupyterLab
  // takes as command mode on that cell (its _evtFocusIn), where its shortcuts work again
  el.addEventListener("keydown", (e) => {
    const cell = el.closest(".jp-Cell");
    if (e.key !== "Escape" || !cell) return; // outside JupyterLab, Esc is the page's
    e.preventDefault();
    e.stopPropagation();
    cell.focus({ preventScroll: true });
  });
  const root = el.attachShadow ? el.attachShadow({ mode: "open" }) : el;
  const style = document.createElement("style");
  style.textContent = model.get("css");
  const graphBox = h("div.graph.widget-graph", { tabindex: "0",
    "aria-label": "Backward graph: drag to pan, click it then wheel or +/− to zoom, Tab to the nodes, Esc back to the notebook" });
  // the keys, as the page says its own (trace_page.js), with the one that leaves the widget
  const keys = h("p.hint.widget-keys", {},
    "Keys: Tab into the graph, then ↑ ↓ ← → walk its nodes · Esc gives the keys back to the notebook.");
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
  // the page's zoom buttons (templates/trace.html), with its words
  const zoom = {
    in: h("button#zoom-in", { type: "button", title: "Zoom in (+)", "aria-label": "Zoom in" }, "+"),
    out: h("button#zoom-out", { type: "button", title: "Zoom out (−)", "aria-label": "Zoom out" }, "−"),
    fit: h("button#zoom-fit", { type: "button", title: "Fit the graph to the view (0)" }, "Fit"),
  };
  const zoomButtons = h("div.zoom-buttons", { role: "group", "aria-label": "Zoom" }, Object.values(zoom));
  // one button per backward pass (the page's timeline, timeline.js, for the passes drawn here)
  const events = h("nav.widget-events", { "aria-label": "Backward passes of the cell" });
  // what is drawn by module: the page's layout bar's words (trace_page.js renderLayoutBar)
  const layoutBar = h("p.widget-layout", { hidden: true });
  // every finding of the cell, of every event (the page's "What to notice", diagnostics.js)
  const findingsList = h("ul.widget-findings-list");
  const findings = h("section.diagnostics.widget-findings", { "aria-label": "Findings", hidden: true },
    h("h2", {}, "What to notice"), findingsList);
  const link = model.get("link");
  root.append(style, h("div.autograd-lab-widget", {},
    h("p.widget-summary", {}, model.get("summary"),
      link ? [" · ", h("a", { href: link, target: "_blank", rel: "noopener" }, "open the run on its server")] : null),
    findings, h("div.widget-toolbar", {}, events, controls, zoomButtons), layoutBar,
    h("div.widget-body", {}, h("div.graph-box", {}, graphBox, status),
      h("aside.widget-details", {}, title, details)), keys));

  const doc = await inflate(model.get("trace_gz"));
  setScript(doc.script); // a notebook's lines are said as its cells'
  let pick = () => {}; // a finding's "show": set once the graph is drawn
  renderDiagnostics(findings, findingsList, doc.diagnostics || [], { onPick: (d) => pick(d), onLine: null });
  // a view (show(tensor): the graph make_dot walks) has no pass: nothing to replay or sum
  const viewIndex = model.get("view");
  const shownView = viewIndex === null || viewIndex === undefined ? null : (doc.views || [])[viewIndex];
  if (shownView) controls.remove();
  const kinds = model.get("kinds");
  const passes = shownView ? [] : doc.events.filter((e) => e.kind === "backward");
  let event = null; // the drawn pass (or view), its graph holding the drawn modules and folds too
  let byId = new Map();
  let units = new Map(); // drawn module or fold id -> unit (app/render/group.py)
  const view = { node: null, param: null, step: null, cell: null };
  const graph = new GraphView(graphBox, {
    onNode: (id) => {
      if (units.has(id)) { openUnit(units.get(id)); return; }
      const node = byId.get(id);
      update({ node: id, param: !shownView && node && node.param && doc.params[node.param] ? node.param : null });
    },
    onBackground: () => update({ node: null, param: null }),
    // the notebook scrolls under the wheel; the graph zooms only once it has focus
    wheelOnFocus: true,
    boxHeight: () => boxHeight,
  });
  let boxHeight = BOX_MIN;
  const hooks = {
    kinds, diagnostics: doc.diagnostics, chartScale: 1, compiledRegions: doc.compiled_regions,
    lineText: () => "", onLine: () => {}, onEvent: (index) => ask({ event: index, opened: [] }),
    onNode: (id) => update({ node: id, param: null }),
    onReplay: (step) => update({ step }),
    onHover: () => {}, onPickNode: (id) => update({ node: id, param: null }),
  };

  /** Ask the kernel for another drawing (widget.py `asked`); it answers with `drawn`. */
  function ask(what) {
    if (!model.get("redraws")) return;
    if (what.event === model.get("event") && JSON.stringify(what.opened) === JSON.stringify(model.get("opened"))) return;
    fill(details, h("p.hint", {}, "Drawing it (the kernel draws; it must be running)…"));
    title.textContent = "Details";
    model.set("asked", { ...what, at: Date.now() }); // a new dict each time: asked again, drawn again
    model.save_changes();
  }

  /** Open a drawn module or fold, as the page does (trace_page.js openUnit). */
  function openUnit(unit) {
    ask({ event: model.get("event"), opened: [...new Set([...(model.get("opened") || []), unit.path])] });
  }

  function renderEvents() {
    const shown = model.get("event");
    fill(events, !passes.length || !model.get("redraws") ? null : passes.map((e) =>
      h("button.widget-event", { type: "button", "data-event": String(e.index),
        "aria-pressed": String(e.index === shown), title: `Draw backward #${e.index}`,
        onclick: () => ask({ event: e.index, opened: [] }) },
      // numbered as the findings and the page number events ("Backward #1 adds ..."), not 1, 2
      `backward #${e.index}${e.line ? ` · ${lineLabel(e.line)}` : ""}`)));
    events.hidden = !events.childElementCount;
  }

  function renderLayoutBar() {
    const opened = model.get("opened") || [];
    if (!units.size && !opened.length) { layoutBar.hidden = true; return; }
    layoutBar.hidden = false;
    const folds = [...units.values()].filter((u) => u.kind === "fold").length;
    const closed = [units.size - folds ? `${units.size - folds} module(s) closed` : "",
      folds ? `${folds} fold(s) of repeated blocks` : ""].filter(Boolean).join(", ");
    fill(layoutBar, units.size ? `Drawn by module: ${closed}. Click one to open it. ` :
      "Every module you opened is open. ",
    opened.length && model.get("redraws") ? h("button#layout-close", { type: "button",
      onclick: () => ask({ event: model.get("event"), opened: [] }) }, "Close what I opened") : null);
  }

  function update(change) {
    setScript(doc.script); // lines.js keeps one cell map per page: another widget's may be there
    Object.assign(view, change);
    if (!event) return;
    const state = shownView ? null : replayState(event, view.step);
    const contrib = new Map();
    ((event.contributions || {})[view.param] || []).forEach((c, i) => {
      contrib.set(c.node, contrib.has(c.node) ? `${contrib.get(c.node)},${i + 1}` : String(i + 1));
    });
    graph.apply({ selected: view.node, replay: state, contrib });
    if (!shownView) renderReplayStatus(status, event, state, byId);
    const node = byId.get(view.node) || (state && state.current ? byId.get(state.current) : null);
    if (view.param) {
      title.textContent = "Parameter: where .grad comes from";
      fill(details, paramView(doc, event, view.param, { ...hooks, cell: view.cell,
        onCell: (cell) => update({ cell }) }));
    } else if (node && !units.has(node.id)) {
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
    const drawnParam = param && event.graph.nodes.find((n) => n.param === param && graph.nodes.has(n.id));
    if (param) { update({ param, node: null }); if (drawnParam) graph.revealNow(drawnParam.id); }
    else if (node) { update({ node, param: null }); graph.revealNow(node); }
  };
  buttons.first.onclick = () => update({ step: 0, node: null });
  buttons.prev.onclick = () => update({ step: Math.max(0, (view.step ?? 1) - 1), node: null });
  buttons.next.onclick = () => update({ step: Math.min(event.order.length, (view.step ?? 0) + 1), node: null });
  buttons.last.onclick = () => update({ step: event.order.length, node: null });
  buttons.stop.onclick = () => update({ step: null });
  // the opening view is given again each time the graph comes into view (below) until the
  // person moves it: JupyterLab lays out a cell's output only once it is scrolled to, and a
  // widget drawn before that measured a box of no size
  let touched = false;
  const touch = () => { touched = true; };
  graphBox.addEventListener("pointerdown", touch, true);
  graphBox.addEventListener("keydown", touch, true);
  zoom.in.onclick = () => { touch(); graph.zoomIn(); };
  zoom.out.onclick = () => { touch(); graph.zoomOut(); };
  zoom.fit.onclick = () => { touch(); graph.fit(); };
  let shownSvg = "";
  const seen = new IntersectionObserver((entries) => {
    if (touched || !shownSvg || !entries.some((e) => e.isIntersecting && e.boundingClientRect.width > 0)) return;
    boxHeight = sizeBox(shownSvg);
    graph.resized();
    opening();
  });

  /** The graph's box: as tall as the drawing at readable labels, within bounds. */
  function sizeBox(svg) {
    const size = drawingSize(svg);
    const width = graphBox.clientWidth || 600;
    const most = Math.max(BOX_MIN, Math.round(window.innerHeight * BOX_MOST));
    if (!size) return most;
    // graphviz draws labels 14 units high at the 1x type (graph.js BASE_UNIT)
    const zoomed = Math.min(BOX_LABEL / 14, (width - 16) / (size.w || 1));
    return Math.max(BOX_MIN, Math.min(most, Math.ceil(size.h * zoomed + 16)));
  }

  /** The view the graph opens on (graph.js open): the whole graph where its labels are then
   *  OPEN_FLOOR px or more; else the loss (the output) and the parameters nearest it, as many
   *  as fit whole in the box at labels of OPEN_FLOOR px. */
  function opening() {
    const drawn = (kind) => event.graph.nodes.filter((n) => n.kind === kind && graph.nodes.has(n.id)).map((n) => n.id);
    const output = drawn("output");
    const boxes = new Map([...output, ...drawn("param")].map((id) => [id, graph.contentBox(id)]).filter(([, b]) => b));
    const middle = (b) => ({ x: (b.x0 + b.x1) / 2, y: (b.y0 + b.y1) / 2 });
    const from = output.length && boxes.has(output[0]) ? middle(boxes.get(output[0])) : null;
    const params = drawn("param").filter((id) => boxes.has(id));
    if (from) {
      const away = (id) => { const m = middle(boxes.get(id)); return Math.hypot(m.x - from.x, m.y - from.y); };
      params.sort((a, b) => away(a) - away(b));
    }
    // in drawing units, the room the box has at labels of OPEN_FLOOR px (graph.js PAD aside)
    const scale = OPEN_FLOOR / graph.unit;
    const room = { w: (graphBox.clientWidth - 16) / scale, h: (graphBox.clientHeight - 16) / scale };
    const focus = output.filter((id) => boxes.has(id));
    let box = focus.length ? { ...boxes.get(focus[0]) } : null;
    for (const id of params) {
      const b = boxes.get(id);
      const grown = box ? { x0: Math.min(box.x0, b.x0), y0: Math.min(box.y0, b.y0),
        x1: Math.max(box.x1, b.x1), y1: Math.max(box.y1, b.y1) } : { ...b };
      if (grown.x1 - grown.x0 > room.w || grown.y1 - grown.y0 > room.h) continue;
      box = grown;
      focus.push(id);
    }
    graph.open({ focus, floor: OPEN_FLOOR, comfy: OPEN_COMFY, most: OPEN_COMFY * 1.3 });
  }

  /** Draw the model's drawing of its event (first, and each time the kernel sends another). */
  let draws = 0;
  async function draw() {
    const generation = ++draws; // a later drawing wins over one still being laid out
    const index = model.get("event");
    const pass = shownView ? { index: null, kind: "view", graph: shownView.graph } :
      doc.events.find((e) => e.index === index);
    let svg = "";
    if (pass) {
      try {
        svg = await drawing(model, (text) => fill(details, h("p.hint", {}, text)));
        if (generation !== draws) return;
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
    graphBox.hidden = false;
    keepPicture(svg);
    units = new Map((model.get("units") || []).map((u) => [u.id, u]));
    // the drawn graph: the pass's nodes drawn as they are, and its modules and folds
    event = units.size ? { ...pass, graph: { ...pass.graph, nodes: [...pass.graph.nodes,
      ...[...units.values()].map((u) => ({ ...u, label: u.name, module: u.path }))] } } : pass;
    byId = new Map(event.graph.nodes.map((n) => [n.id, n]));
    Object.assign(view, { node: null, param: null, step: null, cell: null });
    boxHeight = sizeBox(svg);
    graph.fitHeight();
    graph.show(svg, event, doc.diagnostics);
    shownSvg = svg;
    touched = false;
    opening();
    renderEvents();
    renderLayoutBar();
    update({});
  }
  /** The first drawing, laid out here, sent back to the kernel (widget.py `keep_picture`): it
   *  becomes the cell's static picture, which a notebook saved from now on shows without a
   *  kernel. Past the size the kernel keeps, only the size goes (it says why there is none):
   *  measured as sent, JSON in UTF-8, since Jupyter's server drops a message past 10 MiB. */
  let kept = false;
  function keepPicture(svg) {
    const most = model.get("keep_picture");
    if (kept || !most || model.get("svg") || model.get("drawn") !== 0) return;
    kept = true;
    const size = new TextEncoder().encode(JSON.stringify(svg)).length;
    model.send(size <= most ? { picture: svg } : { picture_size: size });
  }
  model.on("change:drawn", () => { draw(); });
  model.on("change:problem", () => {
    if (model.get("problem")) fill(details, h("p.hint", {}, model.get("problem")));
  });
  await draw();
  seen.observe(graphBox);
  return () => { seen.disconnect(); graph.destroy(); };
}

export default { render };
