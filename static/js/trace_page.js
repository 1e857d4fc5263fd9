// The page of one run: a scenario's, or a stored run of your own code (/runs/{id}). It wires the
// views to one state object, {run, view}, kept in the URL. `run` picks the trace (variant,
// device, options; fixed for a stored run); `view` is what is shown of it (event, node,
// parameter, source line, replay step, heat-map entry). Every change goes through update(),
// which re-renders from the state, so the page and its permalink cannot disagree.

import { ApiError, fetchGradientFlow, fetchGraphLayout, fetchGraphSvg, fetchTrace, scenarioSubject, storedSubject } from "./api.js";
import { Controls, updateExports } from "./controls.js";
import { renderDiagnostics } from "./diagnostics.js";
import { renderFindings } from "./findings.js";
import { fill, h, fmt } from "./dom.js";
import { renderFlow } from "./flow.js";
import { GraphView, phone } from "./graph.js";
import { installKeys } from "./keys.js";
import { installFindingsKey } from "./graph_keys.js";
import { lineLabel, setScript } from "./lines.js";
import { paramView } from "./accumulation.js";
import { lineView, nodeView, savedMemoryParts } from "./panel.js";
import { paramList } from "./params.js";
import { readUrl, viewUrl, writeUrl } from "./permalink.js";
import { onApply, setShown } from "./view_state.js";
import { Progress } from "./progress.js";
import { fitToScreen, installPresenterKeys, nearestStep, nextVariant, renderPresenter, stepView } from "./presenter.js";
import { renderReplayStatus, replayState } from "./replay.js";
import { SourceView } from "./source.js";
import { explain, renderEventNotice, runReport, setStatus } from "./status.js";
import { renderTimeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const page = JSON.parse($("page-data").textContent);
// where the trace comes from: the scenario's endpoints, or the stored run's
const subject = page.run ? storedSubject(page.run) : scenarioSubject(page.scenario);
// the variants in the scenario's order (its VARIANTS), as the form lists them: the page data's
// object has its keys sorted (Jinja's tojson), so the order travels as a list of its own
const variants = page.scenario ? Object.fromEntries((page.variant_order || Object.keys(page.scenario.variants || {}))
  .map((name) => [name, page.scenario.variants[name]])) : null;

let { run, view } = readUrl(subject);
// never "Step -5 of 7": a say=N link past the steps lands on the nearest one
view.say = nearestStep(view.say, (page.steps || []).length);
let doc = null;
let shown = null; // the backward event whose graph is drawn
let drawnKey = null; // which drawing of it: the event and its grouping
let drawings = 0; // drawings asked for: only the latest one's answer is shown
let layout = null; // how a big graph is drawn (graph.json): its grouping and units
const units = new Map(); // drawn unit id (a collapsed module, a fold) -> unit
let flow = null; // gradient flow across depth (GET .../gradient-flow)
let flowMeasure = "norm";
let flowDrawn = null; // what the flow chart shows now: redrawn only when that changes
// above this many nodes the server draws a graph by module (app/render/group.py READABLE_NODES)
const READABLE_NODES = 300;
let hinted = null; // a node pointed at from the accumulation chart
let pending = null; // AbortController of the run being fetched
const steps = page.steps || []; // the narration's paragraphs, for presenter mode
let drawnAs = null; // the drawing on show, as asked of the server (exports ask for the same)
let opened = null; // which opening view the graph was given: its drawing and presenter step
let retyping = false; // a drawing in another type is on its way (presenter mode on or off)
// The label type the page asks the server for (app/render/dot.py `font`), so that labels are
// large on screen without zooming the 1x drawing's spacing up with them: the page's, and the
// projector's. A big graph (drawn by module, or every node) keeps the 1x type.
const PAGE_FONT = 2;
const PRESENT_FONT = 3;
const PRESENT_CHART = 1.3; // a parameter's bars beside the graph, in type the room reads
// labels on screen at the opening view, in CSS px: at least this on the page (and a phone)
const PAGE_LABELS = 12.5;

const status = $("status");
const progress = new Progress($("progress"), $("progress-text"));
const graph = new GraphView($("graph"), {
  onNode: selectNode, onBackground: () => update({ node: null, param: null, line: null, vs: null }),
  // a phone's details sheet lies over the bottom of the graph
  coveredFrom: () => (document.body.classList.contains("sheet-open") ? $("details").getBoundingClientRect().top : Infinity),
});
const source = new SourceView($("source"), { onLine: selectLine });
// a stored run has no settings to change: it is what ran
const controls = subject.fixed ? null : new Controls($("controls"), subject, {
  // a new run keeps the chosen parameter (its bars in the other variant are the scenario), but
  // node ids belong to one graph, so node, line, step and event start afresh
  onChange: changeRun,
});

function changeRun(next) {
  run = next;
  view = { ...view, step: null, cell: null, event: null, node: null, line: null, vs: null };
  // presenter mode stays on the step it was at, with that step's highlights in the new run
  loadRun(true).then(() => { if (view.present && view.say && doc && !pending) say(view.say); });
}

/** Another variant, from presenter mode (its buttons, V); the form shows it too (loadRun). */
function changeVariant(name) {
  if (name && name !== run.variant) changeRun({ ...run, variant: name });
}

// ---- state changes ------------------------------------------------------------------------

function update(changes, { reveal = null } = {}) {
  view = { ...view, ...changes };
  render();
  if (reveal) graph.reveal(reveal);
}

function currentEvent() {
  return doc ? doc.events.find((e) => e.index === view.event) || null : null;
}

function nodeById(id) {
  return shown ? shown.graph.nodes.find((n) => n.id === id) || null : null;
}

function selectNode(id) {
  userPicked = true;
  if (units.has(id)) {
    openUnit(units.get(id));
    return;
  }
  const node = nodeById(id);
  if (!node) return;
  const param = node.param && doc.params[node.param] ? node.param : null;
  update({ node: id, param, line: null, cell: param === view.param ? view.cell : null,
    vs: param === view.param ? view.vs : null }, { reveal: id });
}

function selectParam(name) {
  userPicked = true;
  const node = shown && shown.graph.nodes.find((n) => n.param === name);
  update({ param: name, node: node ? node.id : null, line: null, cell: name === view.param ? view.cell : null,
    vs: name === view.param ? view.vs : null },
    { reveal: node ? node.id : null });
}

function selectLine(line) {
  userPicked = true;
  update({ line, node: null, param: null, cell: null, vs: null });
}

// ---- a big graph, drawn by module ----------------------------------------------------------

/** The drawing the view asks for: {layout, depth, open}, sent as the graph's query. */
function drawingOf(v) {
  return { layout: v.layout, depth: v.depth, open: v.open };
}

/** Open a collapsed module or a fold: the rest of the drawing stays as it is. */
function openUnit(unit) {
  const grouping = layout ? layout.grouping : null;
  view = {
    ...view, layout: "modules", node: null,
    depth: view.depth ?? (grouping && grouping.depth !== null ? grouping.depth : 0),
    open: [...new Set([...(view.open || []), unit.path])],
  };
  redraw();
}

function setDrawing(changes) {
  view = { ...view, node: null, ...changes };
  redraw();
}

async function redraw() {
  progress.start(view.layout === "flat" ? "Laying out every node (a big graph takes a while)" : "Drawing the modules");
  document.body.classList.add("loading");
  try {
    await showGraph();
  } catch (err) {
    setStatus(status, explain(err), "error");
  } finally {
    progress.stop();
    document.body.classList.remove("loading");
  }
  render();
}

function renderFlowSection() {
  const state = { measure: flowMeasure, event: shown ? shown.index : null, param: view.param };
  const key = flow ? JSON.stringify(state) : "none";
  if (key === flowDrawn) return;
  flowDrawn = key;
  renderFlow($("flow"), flow, state, {
    jsonUrl: subject.flowUrl(run), name: `${subject.name}-gradient-flow`,
    onMeasure: (m) => { flowMeasure = m; renderFlowSection(); },
  });
}

function renderLayoutBar() {
  const bar = $("layout-bar");
  const total = shown ? shown.graph.nodes.length : 0;
  const big = total > READABLE_NODES;
  bar.hidden = !shown || (!big && !layout);
  document.querySelectorAll(".legend-grouped").forEach((li) => { li.hidden = !(layout && !layout.grouping.flat); });
  if (bar.hidden) return;
  const grouped = layout && !layout.grouping.flat;
  const depth = grouped ? layout.grouping.depth : null;
  const parts = [];
  if (grouped) {
    const folds = layout.units.filter((u) => u.kind === "fold").length;
    parts.push(h("span.layout-text", {},
      `This graph has ${total.toLocaleString("en")} nodes: drawn by module ` +
      `(${depth === null ? "every module open" : `depth ${depth}`}${folds ? ", repeated blocks folded" : ""}), ` +
      `${layout.nodes.toLocaleString("en")} shown. Click a module to open it.` +
      (layout.grouping.coarser ? ` Drawn coarser than usual: a finer grouping has more than ${layout.grouping.edge_limit.toLocaleString("en")} edges between modules, more than graphviz lays out in time.` : "")));
    parts.push(h("button", { type: "button", id: "layout-flat", onclick: () => setDrawing({ layout: "flat", depth: null, open: null }) }, "Every node"));
    if (depth !== null && depth > 1) parts.push(h("button", { type: "button", id: "layout-less", onclick: () => setDrawing({ layout: "modules", depth: depth - 1 }) }, "Fewer modules"));
    if (depth !== null && depth < layout.grouping.deepest) parts.push(h("button", { type: "button", id: "layout-more", onclick: () => setDrawing({ layout: "modules", depth: depth + 1 }) }, "More modules"));
    if ((view.open || []).length) parts.push(h("button", { type: "button", id: "layout-close", onclick: () => setDrawing({ open: null }) }, "Close what I opened"));
  } else {
    parts.push(h("span.layout-text", {}, `All ${total.toLocaleString("en")} nodes are drawn.`));
    parts.push(h("button", { type: "button", id: "layout-modules", onclick: () => setDrawing({ layout: null, depth: null, open: null }) }, "Draw by module"));
  }
  fill(bar, parts);
}

// ---- presenter mode -----------------------------------------------------------------------

/** Presenter mode on or off. On, it starts at the first step (or the one the address says),
 *  with that step's own highlights, as `?present=1` does. */
async function present(on) {
  const changes = on && steps.length ? stepView(steps, view.say || 1, stepContext()) : { say: null };
  view = { ...view, ...changes, present: on ? true : null };
  // the presenter's drawing has larger type: the page shows its layout at once, and the graph
  // opens on the step once that drawing is in
  if (!doc) {
    render();
    return;
  }
  retyping = true;
  render();
  try {
    await showGraph();
  } catch (err) {
    setStatus(status, explain(err), "error");
  } finally {
    retyping = false;
  }
  render();
}

function stepContext() {
  return { doc, shown, findLine: (text) => source.find(text) };
}

/** Step `n` of the narration: its highlights, and the graph opened on what it points at. */
function say(n) {
  if (n < 1 || n > steps.length) return;
  update(stepView(steps, n, stepContext()));
}

/** Labels on a projector, in CSS px: 18 at 720 px high, 24 at 1080, a little more above. */
function presenterLabels() {
  return Math.min(28, Math.max(16, 18 + (window.innerHeight - 720) / 60)) + 0.5;
}

// ---- the opening view ---------------------------------------------------------------------

/** The scenario's target: the parameter its `Show:` lines name first (the one it asks you to
 *  click), else the node they name first, else the parameter this graph uses most. */
function scenarioTarget() {
  const nodes = shown.graph.nodes;
  const shows = steps.flatMap((step) => step.show);
  for (const item of shows) {
    const node = item.param && nodes.find((n) => n.param === item.param);
    if (node) return node.id;
  }
  for (const item of shows) {
    const node = item.node && nodes.find((n) => n.name === item.node);
    if (node) return node.id;
  }
  let best = null;
  for (const node of nodes) {
    const uses = node.param ? (shown.uses || {})[node.param] || 0 : 0;
    if (uses && (!best || uses > best.uses)) best = { id: node.id, uses };
  }
  return best ? best.id : null;
}

function outputId() {
  const out = shown.graph.nodes.find((n) => n.kind === "output");
  return out ? out.id : null;
}

/** What the page opens on: the node the address picked (or the replay's), else the scenario's
 *  target, and the loss, where backward starts. `must`: the node picked or aimed at, and where
 *  a parameter is picked, the nodes its use badges are on. */
function pageFocus() {
  const replay = replayState(shown, view.step);
  const picked = (view.node && nodeById(view.node) ? view.node : null) || (replay && replay.current);
  const main = picked || scenarioTarget();
  const uses = view.param ? ((shown.contributions || {})[view.param] || []).map((c) => c.node) : [];
  return { focus: [...new Set([main, outputId()].filter(Boolean))], must: [...new Set([main, ...uses].filter(Boolean))] };
}

/** The part of the graph a presenter's step is about: a parameter and the uses that feed it,
 *  a node and its neighbours, or a line's nodes; a step that names none, the page's focus.
 *  `must`: the nodes the step names (a parameter with its uses, a node, a line's nodes), which
 *  the view shows whole whatever their labels' size. */
function stepFocus(n) {
  const step = steps[n - 1];
  const nodes = shown.graph.nodes;
  const ids = [];
  const must = [];
  for (const item of step ? step.show : []) {
    const param = item.param || item.heatmap; // a heat map's parameter is selected (stepView)
    if (param) {
      const node = nodes.find((x) => x.param === param);
      if (node) must.push(node.id, ...((shown.contributions || {})[param] || []).map((c) => c.node));
    } else if (item.node) {
      // every node of that name (mixed_precision's ToCopyBackward0 nodes), the first selected
      for (const node of nodes.filter((x) => x.name === item.node)) {
        must.push(node.id);
        ids.push(...shown.graph.edges.filter((e) => e.source === node.id || e.target === node.id)
          .map((e) => (e.source === node.id ? e.target : e.source)));
      }
    }
  }
  if (view.line) must.push(...nodes.filter((x) => x.line === view.line).map((x) => x.id));
  if (!must.length) return pageFocus();
  return { focus: [...new Set([...must, ...ids])], must: [...new Set(must)] };
}

/** Give the graph the view it opens with: a scenario's target and its loss with labels of at
 *  least PAGE_LABELS px, or the presenter's step in projector-size labels, what it names
 *  always whole; a big graph readable from its output (graph.js initialView). */
function openingView() {
  if (!shown) return;
  // the step's column as wide as it is made (widen() may narrow it again for this step)
  if (document.body.classList.contains("presenting-wide")) {
    document.body.classList.remove("presenting-wide");
    if (view.present) fitToScreen();
  }
  graph.resized(); // the graph area first: the layout may have changed (presenter mode)
  if (shown.graph.nodes.length > READABLE_NODES || units.size) {
    graph.initialView();
  } else {
    const floor = view.present ? presenterLabels() : PAGE_LABELS;
    const { focus, must } = view.present && view.say ? stepFocus(view.say) : pageFocus();
    const open = () => graph.open({ focus, must, floor, comfy: floor * 1.2, most: floor * 1.6 });
    const cut = widen(open(), open, floor);
    if (cut === null) {
      graph.resized();
      open();
    }
  }
  const state = replayState(shown, view.step);
  if (state && state.current) graph.revealNow(state.current);
}

/** A presenter's step whose bars are not beside the graph, where the view's sides cut nodes
 *  of the rows on show (a graph wider than its area at the labels' floor: checkpointing's
 *  reentrant step 3 at 1280 x 720): the step's column is made narrower (app.css
 *  .presenting-wide) if the graph then cuts fewer nodes and the step's text, shrunk to fit
 *  the screen (fitToScreen), still reads at the graph's labels' size. `cut`: the nodes cut
 *  now; `open()` opens the view again and says how many it cuts. Returns the cut it kept, or
 *  null where the narrower column was tried and given up (the caller opens the view again). */
function widen(cut, open, floor) {
  if (!cut || !view.present || view.param || phone.matches) return cut;
  document.body.classList.add("presenting-wide");
  fitToScreen();
  const text = document.querySelector("#presenter .presenter-text > p");
  const fit = parseFloat(getComputedStyle(document.body).getPropertyValue("--present-fit")) || 1;
  const reads = (!text || parseFloat(getComputedStyle(text).fontSize) * fit >= floor) &&
    document.documentElement.scrollHeight <= window.innerHeight + 1; // and it all fits
  if (reads) {
    graph.resized();
    const wider = open();
    if (wider < cut) return wider;
  }
  document.body.classList.remove("presenting-wide");
  fitToScreen();
  return null;
}

/** → and ← in presenter mode: the narration's steps, then the backward replay. */
function presentKey(forward) {
  if (view.step !== null) {
    if (!forward && view.step === 0) update({ step: null }); // back out of the replay to the text
    else setStep(view.step + (forward ? 1 : -1));
  } else if (forward) {
    if (view.say && view.say < steps.length) say(view.say + 1);
    else setStep(1);
  } else if (view.say && view.say > 1) {
    say(view.say - 1);
  }
}

function setStep(step) {
  if (!shown) return;
  const s = step === null ? null : Math.max(0, Math.min(step, shown.order.length));
  const state = replayState(shown, s);
  update({ step: s }, { reveal: state && state.current });
}

async function selectEvent(index) {
  view = { ...view, event: index, step: null, node: null, line: null };
  try {
    await showGraph();
  } catch (err) {
    setStatus(status, explain(err), "error");
  }
  render();
}

// ---- loading ------------------------------------------------------------------------------

async function loadRun(newEntry = false) {
  if (pending) pending.abort();
  const controller = new AbortController();
  pending = controller;
  if (controls) controls.set(run);
  writeUrl(viewUrl(subject, run, view), { newEntry });
  setStatus(status, null);
  const what = [subject.name + ".py", run.variant, ...Object.entries(run.options).map(([k, v]) => `${k} = ${v}`),
    run.device].filter(Boolean).join(", ");
  // a stored run ran already: it is only read back
  progress.start(`${subject.fixed ? "Loading" : "Running"} ${what}`);
  document.body.classList.add("loading");
  try {
    if (run.device !== "cpu" && !subject.fixed) {
      // Ask the worker which devices exist before asking it to run on one it may not have.
      const devices = await devicesReady;
      if (devices && !devices.includes(run.device)) {
        throw new ApiError(422, `Device “${run.device}” is not available on this server ` +
          `(it has: ${devices.join(", ")}).`);
      }
    }
    doc = await fetchTrace(subject, run, { signal: controller.signal });
    setScript(doc.script); // a notebook's lines are said as its cells' (lines.js)
    shown = null;
    flow = null;
    flowDrawn = null;
    // the chart is extra: the page does not wait for it, and a failure leaves it out
    fetchGradientFlow(subject, run, { signal: controller.signal })
      .then((f) => { if (pending === controller || pending === null) { flow = f; renderFlowSection(); } })
      .catch(() => {});
    if (!doc.events.some((e) => e.index === view.event)) {
      const first = doc.events.find((e) => e.kind === "backward") || doc.events[0];
      view.event = first ? first.index : null;
    }
    await showGraph(controller.signal);
    if (pending !== controller) return;
    if (view.param && !view.node && shown) {
      const node = shown.graph.nodes.find((n) => n.param === view.param);
      view.node = node ? node.id : null;
    }
    // `?present=1` starts where the Present button does: at the first step, with its highlights;
    // `&say=N` alone lands as stepping there does, with step N's (an address that also names a
    // node, a parameter or a line keeps what it names: a view someone picked on that step)
    if (view.present && view.step === null && steps.length && (!view.say || !(view.node || view.param || view.line))) {
      view = { ...view, ...stepView(steps, view.say || 1, stepContext()) };
    }
    if (shown) {
      // the drawing is painted before the rest of the page is built: a big model's parameter
      // table, timeline and their layout held its first frame back by 70 ms
      // (bench/paste_to_picture.py). render() opens it again once the page around it is there
      openingView();
      await nextFrame();
      if (pending !== controller) return;
    }
    reportRun();
    render(); // it opens the graph on the scenario's target (a permalink's node, the step's part)
  } catch (err) {
    if (err.name === "AbortError") return;
    doc = null;
    shown = null;
    graph.clear("Nothing to show: see the message above.");
    setStatus(status, explain(err), "error");
  } finally {
    if (pending === controller) {
      pending = null;
      progress.stop();
      document.body.classList.remove("loading");
      if (!doc) render();
    }
  }
}

/** Resolves once the browser has drawn a frame (a task after the next animation frame). */
function nextFrame() {
  // a background tab draws no frames: its page is built at once instead
  if (document.hidden) return Promise.resolve();
  return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
}

async function showGraph(signal) {
  const ev = currentEvent();
  const backward = doc.events.filter((e) => e.kind === "backward");
  const target = !ev ? null : ev.kind === "backward" ? ev :
    [...backward].reverse().find((e) => e.index < ev.index) || backward[0] || null;
  // larger type than the 1x drawing, for a graph small enough to be drawn node by node
  const font = target && target.graph.nodes.length <= READABLE_NODES ? (view.present ? PRESENT_FONT : PAGE_FONT) : null;
  const drawing = { ...drawingOf(view), font };
  const key = target ? `${target.index}|${JSON.stringify(drawing)}` : null;
  if (target === shown && target && key === drawnKey) return;
  const generation = ++drawings; // a later call wins: an earlier answer is dropped
  if (!target) {
    shown = null;
    drawnKey = null;
    drawnAs = null;
    layout = null;
    units.clear();
    graph.clear(doc.error ? "The script stopped before it recorded a graph." :
      (doc.views || []).length ? "This run recorded no backward pass: the graphs it has are drawn below, under “Graphs the script drew”." :
      "This run recorded no backward pass, so there is no graph to draw.");
    return;
  }
  let asked = drawing;
  let nextLayout = null;
  if (view.layout !== "flat" && (target.graph.nodes.length > READABLE_NODES || view.depth !== null || view.open)) {
    // ask how it will be drawn first (cheap, no layout), so the modules can be clicked open
    nextLayout = await fetchGraphLayout(subject, run, target.index, { signal, drawing });
    const g = nextLayout.grouping;
    asked = g.flat ? { layout: "flat", font } : { layout: "modules", depth: g.depth === null ? 0 : g.depth, open: g.opened, font };
  }
  const svg = await fetchGraphSvg(subject, run, target.index, { signal, drawing: asked });
  if (generation !== drawings) return;
  // only now, with the drawing in hand, does the page change what it shows
  shown = target;
  drawnKey = key;
  drawnAs = asked;
  layout = nextLayout;
  units.clear();
  for (const unit of layout ? layout.units : []) units.set(unit.id, unit);
  // the drawn graph: the Trace's nodes that are drawn as they are, and the modules and folds
  const drawn = units.size ? { ...target, graph: { ...target.graph, nodes: [...target.graph.nodes, ...layout.units.map((u) => ({ ...u, label: u.name, module: u.path }))] } } : target;
  graph.show(svg, drawn, doc.diagnostics);
}

/** What the run itself says (the script failed, or never called backward), and its output. */
function reportRun() {
  const [parts, level] = runReport(doc, { onLine: selectLine });
  setStatus(status, parts, level);
  // an explained failure opens on the line that made it and the node it broke, unless the
  // address already chose what to show
  const ex = doc.error && doc.error.explanation;
  if (ex && ex.line && !view.line && !view.node && !view.param) {
    update({ line: ex.line, node: ex.nodes[0] || null });
  }
  renderFigures();
  renderViews();
  const out = $("script-output");
  out.hidden = !(doc.stdout || doc.stderr);
  $("script-stdout").textContent = (doc.stdout || "") + (doc.stderr ? `\n${doc.stderr}` : "");
}

/** The matplotlib figures a stored run made (the server serves each as a PNG). */
function renderFigures() {
  const figures = (page.run && doc.figures) || [];
  $("figures").hidden = !figures.length;
  const via = { show: "plt.show()", savefig: "savefig()", "open at the end": "still open at the end" };
  fill($("figures-list"), figures.map((f, i) => h("figure.run-figure", {},
    h("img", { src: `/api/runs/${encodeURIComponent(page.run.id)}/figures/${i}.png`, width: f.width,
      height: f.height, alt: `Figure ${i + 1} of the script`, loading: "lazy" }),
    h("figcaption", {}, `Figure ${i + 1} · ${via[f.via] || f.via}`,
      f.line ? [" at ", h("button.link.line-link", { type: "button", onclick: () => selectLine(f.line) }, lineLabel(f.line))] : null))));
}

/** The graphs the script asked to see (its make_dot calls, a create_graph gradient's graph),
 *  drawn by the server from the same walk as the Trace's graphs. */
function renderViews() {
  const views = doc.views || [];
  $("views").hidden = !views.length;
  fill($("views-list"), views.map((v, i) => {
    const url = subject.viewUrl(run, i);
    const count = v.graph.nodes.filter((n) => n.kind !== "output").length;
    const match = v.matches ? (v.matches.shared === v.matches.nodes ?
      `all ${v.matches.nodes} of its nodes are in backward #${v.matches.event}'s graph` :
      `${v.matches.shared} of its ${v.matches.nodes} nodes are in backward #${v.matches.event}'s graph`) :
      v.kind === "make_dot" ? "none of its nodes is in a recorded backward pass" : null;
    const from = v.event !== null && v.event !== undefined ?
      h("button.link", { type: "button", onclick: () => selectEvent(v.event) }, `backward #${v.event}`) : null;
    return h("figure.run-figure.run-view", {},
      h("a", { href: url, target: "_blank", rel: "noopener", title: "Open the picture full size" },
        h("img", { src: url, alt: `${v.label}: ${count} nodes`, loading: "lazy" })),
      h("figcaption", {}, v.kind === "gradient" ? `${v.label}, from ` : v.label, from,
        v.line ? [" at ", h("button.link.line-link", { type: "button", onclick: () => selectLine(v.line) }, lineLabel(v.line))] : null,
        ` · ${count} node${count === 1 ? "" : "s"}`, match ? ` · ${match}` : null,
        v.graph.truncated ? " · cut short: too large to draw whole" : null));
  }));
}

// ---- rendering ----------------------------------------------------------------------------

/** The graph's highlights only: cheap, so hovering a bar can call it without redrawing panels. */
function highlight() {
  const ev = currentEvent();
  const replay = ev && ev.kind === "backward" ? replayState(shown, view.step) : null;
  const contrib = new Map(); // node id -> the use numbers it sent to the chosen parameter
  if (view.param && ev && ev.kind === "backward") {
    ((ev.contributions || {})[view.param] || []).forEach((c, i) => {
      contrib.set(c.node, contrib.has(c.node) ? `${contrib.get(c.node)},${i + 1}` : String(i + 1));
    });
  }
  const lineNodes = new Set(view.line && shown ? shown.graph.nodes.filter((n) => n.line === view.line).map((n) => n.id) : []);
  graph.apply({ selected: view.node, line: lineNodes, replay, contrib, hinted });
  return replay;
}

function render() {
  const ev = currentEvent();
  const diagnostics = doc ? doc.diagnostics : [];
  const node = nodeById(view.node);
  const replay = highlight();
  source.annotate(shown, doc);
  const current = replay && replay.current ? nodeById(replay.current) : null;
  source.select(view.line ?? (node && node.line) ?? (current && current.line) ?? null);
  if (doc) {
    renderTimeline($("timeline"), doc, view.event, { onEvent: selectEvent });
    renderDiagnostics($("diagnostics"), $("diagnostics-list"), diagnostics, { onPick: pickDiagnostic, onLine: selectLine });
    renderFindings($("findings"), $("findings-list"), $("findings-more"), diagnostics,
      { onPick: pickFinding, onRead: readDiagnostic });
    fill($("params-body"), paramList(doc, ev, { selected: view.param, diagnostics, onParam: selectParam }));
  } else {
    fill($("timeline"));
    fill($("params-body"));
    $("diagnostics").hidden = true;
    $("findings").hidden = true;
  }
  fitGraphBelowFindings();
  $("params").hidden = !doc;
  renderEventNotice($("event-notice"), ev, { onLine: selectLine });
  renderPanel(ev, node, diagnostics, replay);
  renderReplayStatus($("replay-status"), ev, replay, new Map((shown ? shown.graph.nodes : []).map((n) => [n.id, n])));
  renderPresenter($("presenter"), steps, view, replay && { step: view.step, total: shown ? shown.order.length : 0 }, {
    doc, event: ev, lineText: (n) => source.text(n),
    variants: subject.fixed ? null : variants, variant: run.variant, onVariant: changeVariant,
    // a phone's step text opened or folded: the graph below it takes the rest of the screen
    onResize: () => { if (shown && opened) openingView(); },
  });
  $("present-toggle").setAttribute("aria-pressed", view.present ? "true" : "false");
  renderSheet();
  // a new drawing, presenter mode on or off, another step: the graph opens on what matters
  const opening = `${drawnKey}|${view.present ? `say ${view.say || 0}` : "page"}`;
  if (shown && drawnKey && !retyping && opening !== opened) {
    opened = opening;
    openingView();
  }
  for (const id of ["replay-first", "replay-prev", "replay-next", "replay-last", "replay-stop"]) {
    $(id).disabled = !(ev && ev.kind === "backward");
  }
  $("replay-stop").disabled = view.step === null;
  updateExports(subject, run, shown ? shown.index : null, Boolean(doc), drawnAs || drawingOf(view));
  renderLayoutBar();
  renderFlowSection();
  // classroom.js asks the class about what is shown
  setShown({ doc, event: ev,
    scenario: page.class_question ? { ...page.class_question, scenario: page.scenario.name } : null });
  const url = viewUrl(subject, run, view);
  if (doc) writeUrl(url);
  $("permalink").value = location.origin + url;
}

/** On a phone, what is picked is shown in a sheet over the graph (not 2,000 px down the page);
 *  on a screen where the details lie below the scenario's text, they move up beside the graph
 *  while a node or a parameter is picked (body.picked in app.css). */
function renderSheet() {
  const picked = Boolean(doc && (view.node || view.param));
  if (picked !== document.body.classList.contains("picked")) {
    document.body.classList.toggle("picked", picked);
    if (picked) requestAnimationFrame(revealDetails);
  }
  const open = phone.matches && !view.present && Boolean(doc && (view.node || view.param || view.line));
  const was = document.body.classList.contains("sheet-open");
  // a sheet this reader did not ask for (a followed view, a failed run opening on its line)
  // opens folded to its title where a failed run's explanation is on the page: the
  // explanation is the answer, and half the screen of sheet would cover its fix
  if (open && !was) sheetFolded = !userPicked && Boolean(status.querySelector(".explanation"));
  if (userPicked || !open) sheetFolded = false;
  userPicked = false;
  document.body.classList.toggle("sheet-folded", open && sheetFolded);
  document.body.classList.toggle("sheet-open", open);
  $("details-close").hidden = !open;
  if (open && !was) $("details").scrollTop = 0;
}

function renderPanel(ev, node, diagnostics, replay) {
  const title = $("details-title");
  const body = $("details-body");
  const hooks = {
    kinds: page.kinds, diagnostics, cell: view.cell, chartScale: view.present ? PRESENT_CHART : 1,
    compiledRegions: doc && doc.compiled_regions,
    lineText: (n) => source.text(n), onLine: selectLine, onNode: selectNode, onReplay: setStep, onEvent: selectEvent,
    onCell: (cell) => update({ cell }),
    // a parameter's .grad after two passes (grad_compare.js); opened, it is brought into view
    compare: view.vs,
    onCompare: (vs) => {
      const opening = Boolean(vs && !view.vs);
      userPicked = true;
      update({ vs });
      if (opening) requestAnimationFrame(revealCompare);
    },
    onHover: (id) => { hinted = id; highlight(); },
    onPickNode: (id) => update({}, { reveal: id }),
  };
  if (!doc || !ev) {
    title.textContent = "Details";
    fill(body, h("p.hint", {}, doc ? "This run has no events to show." :
      pending ? "Waiting for the run…" : "No run to show: see the message above."));
  } else if (view.param && doc.params[view.param]) {
    title.textContent = ev.kind === "step" ? `Parameter at step #${ev.index}` : `Parameter: where .grad comes from`;
    fill(body, paramView(doc, ev, view.param, hooks));
  } else if (node) {
    title.textContent = "Node";
    fill(body, nodeView(shown, node, hooks));
  } else if (view.line && shown) {
    title.textContent = "Source line";
    fill(body, lineView(shown, view.line, hooks));
  } else if (replay && replay.current) {
    // during a replay with nothing picked, the panel follows the node that runs now
    title.textContent = `Replay step ${replay.step}: running now`;
    fill(body, nodeView(shown, nodeById(replay.current), hooks));
  } else {
    title.textContent = "Details";
    fill(body, h("p.hint", {}, ev.kind === "step" ?
      `Optimizer step #${ev.index} (${ev.optimizer}): pick a parameter below to see its weights before and after.` :
      "Click a node in the graph, a parameter below, or a highlighted source line."),
    ev.kind === "backward" ? savedMemoryParts(ev) : "",
    h("p.hint", {}, "Keys: ← → replay the backward pass · Tab into the graph, then ↑ ↓ ← → walk its nodes · F: what to notice · Esc clears · + − 0 zoom."),
    h("p.run-facts", {}, `torch ${doc.torch || "?"} · device ${doc.device}` +
      (doc.elapsed ? ` · run took ${fmt(doc.elapsed, 2)} s` : "")));
  }
}

/** A finding picked in the strip above the graph: what it names, and the panel that answers
 *  it brought into view. */
function pickFinding(d) {
  pickDiagnostic(d);
  revealDetails();
}

/** The whole text of a finding in "What to notice", scrolled to and focused. */
function readDiagnostic(d, index) {
  const entry = document.getElementById(`diag-${index}`);
  if (!entry) return;
  entry.scrollIntoView({ block: "center" });
  entry.focus({ preventScroll: true });
}

let userPicked = false; // this page's reader picked what is shown (a tap, a click, a key)
let sheetFolded = false; // the phone's sheet shows only its title (renderSheet)

let findingsHeight = 0;

/** The strip above the graph changed height: the graph gives or takes it, so that its bottom
 *  stays on the first screen. */
function fitGraphBelowFindings() {
  const now = $("findings").hidden ? 0 : $("findings").offsetHeight;
  if (now === findingsHeight) return;
  findingsHeight = now;
  // the findings come with a new run, before anyone moved the graph: it opens again on the
  // height it now has (a view made for the taller box would put the loss below its edge)
  if (shown && opened) openingView();
  else graph.resized();
}

/** Where the details panel lies below the window (a 1366 or 1280 px screen puts it under the
 *  scenario's text), the page moves it up beside the graph once something is picked
 *  (body.picked in app.css) and scrolls it into view if it is still out of sight. */
function revealDetails() {
  const panel = $("details");
  if (!panel || phone.matches || view.present) return; // a phone shows it in a sheet
  const box = panel.getBoundingClientRect();
  if (box.top < 0 || box.top > window.innerHeight - 120) panel.scrollIntoView({ block: "nearest" });
}

/** The compare just opened, in sight: in the phone's sheet, or the page scrolled to it. */
function revealCompare() {
  const section = document.querySelector("#details .grad-compare");
  if (section) section.scrollIntoView({ block: "nearest" });
}

function pickDiagnostic(d) {
  if (d.event !== null && d.event !== undefined && d.event !== view.event) {
    selectEvent(d.event).then(() => pickDiagnostic({ ...d, event: null }));
    return;
  }
  if (d.params && d.params.length) selectParam(d.params[0]);
  else if (d.nodes && d.nodes.length) selectNode(d.nodes[0]);
}

// ---- keyboard and buttons -----------------------------------------------------------------

// presenter mode takes P, the arrows, Esc and V before the page's own keys (keys.js)
installPresenterKeys({
  ready: () => Boolean(shown),
  presenting: () => Boolean(view.present),
  toggle: () => present(!view.present),
  forward: () => presentKey(true),
  back: () => presentKey(false),
  leave: () => present(false),
  variant: (by) => { if (!subject.fixed) changeVariant(nextVariant(variants, run.variant, by)); },
});

installKeys({
  replaying: () => view.step !== null,
  step: () => view.step ?? 0,
  toStep: setStep,
  toEnd: () => setStep(shown ? shown.order.length : 0),
  clear: () => update({ node: null, param: null, line: null, step: null, cell: null, vs: null }),
  zoomIn: () => graph.zoomIn(),
  zoomOut: () => graph.zoomOut(),
  fit: () => graph.fit(),
  ready: () => Boolean(shown),
});
installFindingsKey();

$("replay-first").addEventListener("click", () => setStep(0));
$("replay-prev").addEventListener("click", () => setStep(view.step === null ? 0 : view.step - 1));
$("replay-next").addEventListener("click", () => setStep(view.step === null ? 1 : view.step + 1));
$("replay-last").addEventListener("click", () => setStep(shown ? shown.order.length : 0));
$("replay-stop").addEventListener("click", () => setStep(null));
$("zoom-in").addEventListener("click", () => graph.zoomIn());
$("zoom-out").addEventListener("click", () => graph.zoomOut());
$("zoom-fit").addEventListener("click", () => graph.fit());
$("present-toggle").addEventListener("click", () => present(!view.present));
$("presenter-next").addEventListener("click", () => presentKey(true));
$("presenter-prev").addEventListener("click", () => presentKey(false));
$("presenter-exit").addEventListener("click", () => present(false));
$("details-close").addEventListener("click", () => update({ node: null, param: null, line: null, cell: null, vs: null }));
// a folded sheet (renderSheet) opens with a tap anywhere on it
$("details").addEventListener("click", (e) => {
  if (!document.body.classList.contains("sheet-folded") || e.target.closest("#details-close")) return;
  e.preventDefault();
  sheetFolded = false;
  document.body.classList.remove("sheet-folded");
  $("details").scrollTop = 0;
});
$("permalink-copy").addEventListener("click", async () => {
  const input = $("permalink");
  try {
    await navigator.clipboard.writeText(input.value);
    $("permalink-copy").textContent = "Link copied ✓";
  } catch {
    input.select(); // no clipboard access (e.g. plain http on another host): let the user copy
    $("permalink-copy").textContent = "Press Ctrl+C to copy";
  }
  setTimeout(() => { $("permalink-copy").textContent = "Copy link to this view"; }, 2500);
});
// Back/Forward, and a view applied by following a teacher (view_state.js): redraw from the URL
function redrawFromUrl() {
  const next = readUrl(subject);
  const sameRun = JSON.stringify(next.run) === JSON.stringify(run);
  run = next.run;
  view = { ...next.view, say: nearestStep(next.view.say, steps.length) };
  if (sameRun && doc) showGraph().then(render).then(bringPickedIntoView);
  else loadRun().then(bringPickedIntoView);
}

/** A phone following the class (or going back to a view): what is picked was chosen on another
 *  screen, so it may lie anywhere in the drawing. The page is scrolled to the graph if that is
 *  out of sight, and the node (or the parameter's) panned into the part of the graph above the
 *  details sheet. A failed run's explanation is the answer there: it is not scrolled away (the
 *  sheet gives way to it instead: renderSheet). */
function bringPickedIntoView() {
  if (!phone.matches || view.present || !shown) return;
  const param = view.param && shown.graph.nodes.find((n) => n.param === view.param);
  const id = view.node || (param && param.id);
  if (!id) return;
  requestAnimationFrame(() => {
    const area = $("graph").getBoundingClientRect();
    const sheetTop = document.body.classList.contains("sheet-open") ? $("details").getBoundingClientRect().top : window.innerHeight;
    const explained = status.querySelector(".explanation");
    if (explained) {
      // the explanation stays the answer: the sheet folds, the explanation comes into view
      if (!sheetFolded && document.body.classList.contains("sheet-open")) {
        sheetFolded = true;
        document.body.classList.add("sheet-folded");
      }
      const box = explained.getBoundingClientRect();
      const covered = $("details").getBoundingClientRect().top;
      if (box.top < 0 || box.bottom > Math.min(window.innerHeight, covered)) explained.scrollIntoView({ block: "start" });
    } else if (area.top < 0 || area.top > sheetTop - 160) window.scrollBy(0, area.top - 8);
    graph.revealNow(id, 6);
  });
}
window.addEventListener("popstate", redrawFromUrl);
onApply(redrawFromUrl);
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    renderSheet();
    // a projector's window that went full screen, a phone turned on its side: the step's text
    // fitted and the graph's opening view made again at the new size, unless the person moved
    // the graph since it opened (then their view is kept)
    if (view.present) fitToScreen();
    if (shown && (view.present || graph.untouched())) openingView();
    else graph.resized();
  }, 150);
});

// The class bar above the page (classroom.js) appears, grows or shrinks when a class starts,
// a question is asked or put away: the graph gives or takes that height, so that its bottom
// stays on the first screen (on a projector the bar is a band of fixed height: app.css)
let classBarHeight = 0;
if ($("class-bar") && window.ResizeObserver) {
  new ResizeObserver(() => {
    const now = $("class-bar").offsetHeight;
    if (now === classBarHeight) return;
    classBarHeight = now;
    graph.resized();
  }).observe($("class-bar"));
}

if (controls) controls.set(run);
graph.fitHeight();
const devicesReady = controls ? controls.loadDevices() : null;
loadRun().then(bringPickedIntoView); // a link (or a followed class) may name a node anywhere in the drawing
