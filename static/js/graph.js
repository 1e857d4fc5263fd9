// The server-rendered SVG of one backward graph, inlined so that its nodes can be clicked.
// Graphviz gives every node <g> the Trace node id and every edge <g> the id e-SOURCE-TARGET-SLOT
// (app/render/dot.py), so the page goes from a drawing to the Trace record and back by id.
// Highlights are CSS classes only; how they look (thickness, dashes, not just hue) is in app.css.

import { s } from "./dom.js";
import { GraphWalk } from "./graph_keys.js";
import { hookCounts } from "./hook_calls.js";
import { nodeLineLabel } from "./lines.js";
import { touchGestures } from "./touch.js";

// Labels are drawn 14 units high at the server's 1x type (app/render/dot.py; the page may ask
// for larger type, `font`): sizes here are label sizes on screen, in CSS px, whatever the type.
// A big graph fitted so that its labels are below LEGIBLE px opens at READABLE px instead (the
// Fit button still shows it whole).
const BASE_UNIT = 14;
const LEGIBLE = 0.75 * BASE_UNIT;
const READABLE = 0.95 * BASE_UNIT;
// fitted to its width below this zoom of the 1x type, a graph is a speck (every node of a big
// model): it opens at READABLE on its output instead
const UNREADABLE = 0.25;
const MAX_LABEL = 1.6 * BASE_UNIT; // a small graph fitted whole is not blown up past this
const MIN_HEIGHT = 300;
const PAD = 8; // px kept free around what an opening view shows
const STATE_CLASSES = ["is-selected", "is-line", "is-current", "is-done", "is-pending",
  "is-contrib", "is-hinted", "is-edge-done", "is-edge-new"];

export class GraphView {
  /** `coveredFrom()`: the screen y below which something lies over the graph (a phone's
   * details sheet), or Infinity. `wheelOnFocus`: the wheel zooms only while the graph has
   * focus, and else scrolls what holds it (a notebook, widget.js). `boxHeight()`: the graph
   * area's height in px, where it is not the rest of the first screen (fitHeight). */
  constructor(container, { onNode, onBackground, coveredFrom = () => Infinity, wheelOnFocus = false,
    boxHeight = null }) {
    this.container = container;
    this.wheelOnFocus = wheelOnFocus;
    this.boxHeight = boxHeight;
    this.onNode = onNode;
    this.onBackground = onBackground;
    this.coveredFrom = coveredFrom;
    this.unit = BASE_UNIT; // the drawing's label size in its own units
    this.svg = null;
    this.panZoom = null;
    this.nodes = new Map(); // id -> <g>
    this.edges = new Map(); // edge id -> {g, edge}
    this.down = null;
    // A drag that pans the graph must not also count as a click on the node under it.
    container.addEventListener("pointerdown", (e) => { this.down = [e.clientX, e.clientY]; }, true);
    container.addEventListener("click", (e) => this.click(e));
    container.addEventListener("keydown", (e) => this.key(e));
    this.walk = new GraphWalk(this); // arrow keys along the edges, one Tab stop (graph_keys.js)
    if (wheelOnFocus) {
      container.addEventListener("focusin", () => this.wheel());
      container.addEventListener("focusout", (e) => { if (!container.contains(e.relatedTarget)) this.wheel(false); });
    }
  }

  /** Whether the wheel zooms the graph: always on the page; with `wheelOnFocus`, while the
   * graph (or one of its nodes) has focus. */
  wheel(on = this.hasFocus()) {
    if (!this.panZoom || !this.wheelOnFocus) return;
    if (on) this.panZoom.enableMouseWheelZoom();
    else this.panZoom.disableMouseWheelZoom();
    this.container.classList.toggle("wheel-zooms", on);
  }

  hasFocus() {
    const active = this.container.getRootNode().activeElement; // a shadow root's own, in a widget
    return Boolean(active && this.container.contains(active));
  }

  /** Size the drawing area to the rest of the first screen, so the page opens with the whole
   * graph area in view (a projector has no room to spare); never below MIN_HEIGHT. */
  fitHeight() {
    if (this.boxHeight) {
      this.container.style.height = `${this.boxHeight()}px`;
      return;
    }
    const top = this.container.getBoundingClientRect().top + window.scrollY;
    if (!this.container.offsetParent) return; // not shown: nothing to size
    // on a phone the graph keeps its fingers (touch pans it): leave a strip to scroll the page by
    const most = window.innerWidth <= 600 ? window.innerHeight * 0.7 : Infinity;
    const height = Math.max(MIN_HEIGHT, Math.min(most, window.innerHeight - top - 12));
    this.container.style.height = `${height}px`;
  }

  /** Replace the drawing. `event` is the Trace backward event it shows. */
  show(svgText, event, diagnostics = []) {
    this.destroy();
    const parsed = new DOMParser().parseFromString(svgText, "image/svg+xml");
    const root = parsed.documentElement;
    if (root.nodeName !== "svg") throw new Error("the server sent a drawing that is not SVG");
    const svg = document.importNode(root, true);
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("class", "graph-svg");
    svg.setAttribute("role", "group");
    svg.setAttribute("aria-label", `Backward graph with ${event.graph.nodes.length} nodes`);
    this.container.replaceChildren(svg);
    this.svg = svg;
    // the drawing's label type: badges and highlight lines are scaled with it (--ink in app.css)
    this.unit = [...svg.querySelectorAll("g.node text")].map((t) => parseFloat(t.getAttribute("font-size")))
      .filter((v) => v > 0).reduce((a, b) => Math.min(a, b), Infinity);
    if (!Number.isFinite(this.unit)) this.unit = BASE_UNIT;
    this.container.style.setProperty("--ink", String(this.unit / BASE_UNIT));
    const byId = new Map(event.graph.nodes.map((n) => [n.id, n]));
    for (const node of event.graph.nodes) {
      const g = svg.getElementById(node.id);
      if (!g) continue;
      this.nodes.set(node.id, g);
      g.setAttribute("role", "button");
      g.setAttribute("aria-label", describe(node));
      g.querySelector("title")?.remove(); // the <a xlink:title> tooltip says more
    }
    for (const edge of event.graph.edges) {
      const id = `e-${edge.source}-${edge.target}-${edge.slot}`;
      const g = svg.getElementById(id);
      if (g) this.edges.set(id, { g, edge });
    }
    this.addDiagnosticBadges(event, diagnostics, byId);
    this.addHookBadges(event);
    if (window.svgPanZoom) {
      this.panZoom = window.svgPanZoom(svg, {
        fit: true, center: true, minZoom: 0.1, maxZoom: 25, zoomScaleSensitivity: 0.3,
        dblClickZoomEnabled: false, controlIconsEnabled: false,
        customEventsHandler: touchGestures({ onTap: (target) => this.pick(target) }),
      });
      // a huge graph fits at a tiny zoom: let it still be zoomed in far enough to read (a
      // projector's 30 px labels on a small graph too)
      const fitted = this.panZoom.getSizes().realZoom;
      const most = (4 * READABLE) / this.unit;
      if (fitted * 25 < most) this.panZoom.setMaxZoom(most / fitted);
      this.notHuge();
      this.readable();
      this.wheel();
    }
    this.walk.drawn(svg);
  }

  /** A tall graph fitted whole has unreadable labels on a projector: then zoom in to READABLE
   * (or the full width), and show the bottom, where the output is and backward starts. */
  readable() {
    const sizes = this.panZoom.getSizes();
    if (sizes.realZoom * this.unit >= LEGIBLE) return;
    const widthZoom = sizes.width / (sizes.viewBox.width || 1);
    if (widthZoom * this.unit < UNREADABLE * BASE_UNIT) {
      // too wide as well as too tall (every node of a 7,000-node model): no fit reads, so open
      // readable on the output, where backward starts, and let the user pan from there.
      // svg-pan-zoom applies a fit on the next animation frame: measure after it
      const panZoom = this.panZoom;
      const asked = this.readables = (this.readables || 0) + 1;
      requestAnimationFrame(() => requestAnimationFrame(() => {
        // only the latest call: an earlier one would measure before this one's pan is drawn
        if (this.panZoom !== panZoom || asked !== this.readables) return;
        const area = this.svg.getBoundingClientRect();
        const root = this.svg.querySelector("g.node.kind-output");
        const box = root ? root.getBoundingClientRect() : area;
        const point = { x: box.left + box.width / 2 - area.left, y: box.top + box.height / 2 - area.top };
        // the zoom drawn now, measured on the page (the library's own figure is ahead of it)
        const drawn = root ? box.height / (root.getBBox().height || 1) : panZoom.getSizes().realZoom;
        panZoom.zoomAtPoint(panZoom.getZoom() * (READABLE / this.unit / drawn), point);
        // the output in the middle of the visible area
        const seen = this.container.getBoundingClientRect();
        panZoom.panBy({ x: seen.left - area.left + seen.width / 2 - point.x,
          y: seen.top - area.top + seen.height * 0.5 - point.y });
      }));
      return;
    }
    const target = Math.min(READABLE / this.unit, widthZoom);
    if (target <= sizes.realZoom * 1.05) return;
    this.panZoom.zoom(this.panZoom.getZoom() * (target / sizes.realZoom));
    const after = this.panZoom.getSizes();
    const pan = this.panZoom.getPan();
    this.panZoom.pan({ x: pan.x, y: sizes.height - after.viewBox.height * after.realZoom - after.viewBox.y * after.realZoom - 8 });
    this.panZoom.pan({ x: (sizes.width - after.viewBox.width * after.realZoom) / 2 - after.viewBox.x * after.realZoom, y: this.panZoom.getPan().y });
  }

  /** An empty graph area with a sentence saying why. */
  clear(message) {
    this.destroy();
    this.walk.cleared();
    this.container.replaceChildren();
    if (message) {
      const p = document.createElement("p");
      p.className = "graph-empty";
      p.textContent = message;
      this.container.append(p);
    }
  }

  destroy() {
    if (this.panZoom) this.panZoom.destroy();
    this.panZoom = null;
    this.svg = null;
    this.nodes.clear();
    this.edges.clear();
  }

  /** Diagnostics point at parameters and nodes: a badge (shape, not colour alone) marks them. */
  addDiagnosticBadges(event, diagnostics, byId) {
    const marks = new Map(); // node id -> worst level
    const rank = { info: 0, warning: 1, error: 2 };
    for (const d of diagnostics) {
      if (d.event !== null && d.event !== undefined && d.event !== event.index) continue;
      const ids = [...(d.nodes || [])];
      for (const name of d.params || []) {
        for (const n of byId.values()) if (n.param === name) ids.push(n.id);
      }
      for (const id of ids) {
        if (!byId.has(id)) continue;
        const old = marks.get(id);
        if (!old || rank[d.level] > rank[old]) marks.set(id, d.level);
      }
    }
    for (const [id, level] of marks) {
      const g = this.nodes.get(id);
      if (!g) continue;
      g.classList.add("has-diagnostic", `diag-${level}`);
      const box = shapeBox(g);
      // on the node's top right corner, clear of its label
      const k = this.unit / BASE_UNIT;
      g.append(badge(box.x + box.width + 7 * k, box.y + 2 * k, level === "info" ? "i" : "!", `badge diag-badge badge-${level}`, k));
    }
  }

  /** A node the script's hooks ran on in this pass: a small "h" on its bottom right corner
   *  (the node panel lists them with their call counts). */
  addHookBadges(event) {
    for (const [id, count] of hookCounts(event)) {
      const g = this.nodes.get(id);
      if (!g) continue;
      const box = shapeBox(g);
      const k = this.unit / BASE_UNIT;
      // beside the node, not inside it, as the use badges are (axe: its read name)
      const mark = badge(box.x + box.width + 7 * k, box.y + box.height - 2 * k, "h", "badge hook-badge", k);
      mark.dataset.node = id;
      mark.dataset.hooks = String(count);
      g.after(mark);
    }
  }

  /** Apply the highlight state: see trace_page.js for how it is computed from the view. */
  apply({ selected = null, line = new Set(), replay = null, contrib = new Map(), hinted = null } = {}) {
    for (const [id, g] of this.nodes) {
      g.classList.remove(...STATE_CLASSES);
      if (id === selected) g.classList.add("is-selected");
      if (line.has(id)) g.classList.add("is-line");
      if (id === hinted) g.classList.add("is-hinted");
      if (contrib.has(id)) g.classList.add("is-contrib");
      if (replay) {
        if (id === replay.current) g.classList.add("is-current");
        else if (replay.done.has(id)) g.classList.add("is-done");
        else if (replay.pending.has(id)) g.classList.add("is-pending");
      }
      g.querySelectorAll(".use-badge").forEach((b) => b.remove());
    }
    this.svg?.querySelectorAll(".use-badge").forEach((b) => b.remove());
    this.walk.follow(selected);
    for (const [id, number] of contrib) {
      const g = this.nodes.get(id);
      if (!g) continue;
      const box = shapeBox(g);
      // on the node's top left corner, clear of its label
      const k = this.unit / BASE_UNIT;
      // beside the node, not inside it: a number in the node would be part of its name on
      // screen but not of the name it is read by (axe: label-content-name-mismatch)
      const mark = badge(box.x - 7 * k, box.y + 2 * k, String(number), "badge use-badge", k);
      mark.dataset.node = id;
      g.after(mark);
    }
    for (const [id, { g }] of this.edges) {
      g.classList.remove(...STATE_CLASSES);
      if (!replay) continue;
      if (replay.newEdges.has(id)) g.classList.add("is-edge-new");
      else if (replay.doneEdges.has(id)) g.classList.add("is-edge-done");
      else g.classList.add("is-pending");
    }
    this.container.classList.toggle("replaying", Boolean(replay));
  }

  /** Bring a node into view if it is outside the visible area. */
  reveal(id) {
    // after the page has laid itself out (a phone's sheet may just have opened)
    requestAnimationFrame(() => this.revealNow(id));
  }

  /** `margin`: px the node must be clear of the area's edges (a focus ring is drawn around it). */
  revealNow(id, margin = 0) {
    const box = this.contentBox(id);
    if (!box || !this.panZoom) return;
    // where the node is on screen, from the library's own state (the drawn transform may lag)
    const { realZoom: z } = this.panZoom.getSizes();
    const pan = this.panZoom.getPan();
    const area = this.svg.getBoundingClientRect();
    const node = { left: area.left + pan.x + box.x0 * z, right: area.left + pan.x + box.x1 * z,
      top: area.top + pan.y + box.y0 * z, bottom: area.top + pan.y + box.y1 * z };
    // the part of the graph area actually seen (the page may be scrolled, a sheet may cover it)
    const top = Math.max(area.top, 0);
    const bottom = Math.min(area.bottom, window.innerHeight, this.coveredFrom());
    const view = { left: area.left, right: area.right, top, bottom: Math.max(bottom, top + 40) };
    const inside = node.left >= view.left + margin && node.right <= view.right - margin &&
      node.top >= view.top + margin && node.bottom <= view.bottom - margin;
    if (inside) return;
    this.panZoom.panBy({
      x: (view.left + view.right) / 2 - (node.left + node.right) / 2,
      y: (view.top + view.bottom) / 2 - (node.top + node.bottom) / 2,
    });
  }

  /** A node's box (or an element's) in the drawing's own units: where it is whatever the pan
   * and zoom, {x0, y0, x1, y1}. */
  contentBox(id) {
    const el = typeof id === "string" ? this.nodes.get(id) : id;
    const viewport = this.svg && this.svg.querySelector(".svg-pan-zoom_viewport");
    if (!el || !viewport) return null;
    const outer = viewport.getCTM();
    const inner = el.getCTM();
    if (!outer || !inner) return null; // not laid out (hidden)
    const m = outer.inverse().multiply(inner);
    const b = el.getBBox();
    const corners = [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]]
      .map(([x, y]) => new DOMPoint(x, y).matrixTransform(m));
    return { x0: Math.min(...corners.map((p) => p.x)), x1: Math.max(...corners.map((p) => p.x)),
      y0: Math.min(...corners.map((p) => p.y)), y1: Math.max(...corners.map((p) => p.y)) };
  }

  /**
   * The view a scenario (or a presenter's step) opens with: the whole graph if its labels are
   * then at least `floor` px on screen; else `focus` (node ids, the first the one that must
   * be seen whole) at labels of `floor` px or more (up to `comfy` when it fits at that), the
   * rest of the graph a pan away. Never blown up past `most` px.
   */
  open({ focus = [], floor = 12, comfy = floor * 1.25, most = floor * 1.6 } = {}) {
    if (!this.panZoom) return;
    this.panZoom.resize();
    const sizes = this.panZoom.getSizes();
    const vb = sizes.viewBox;
    const all = { x0: vb.x, y0: vb.y, x1: vb.x + vb.width, y1: vb.y + vb.height };
    const room = { w: Math.max(sizes.width - 2 * PAD, 40), h: Math.max(sizes.height - 2 * PAD, 40) };
    const fits = (b) => Math.min(room.w / (b.x1 - b.x0 || 1), room.h / (b.y1 - b.y0 || 1));
    let zoom = fits(all);
    let box = all;
    let first = null;
    if (zoom * this.unit >= floor) {
      zoom = Math.min(zoom, most / this.unit);
    } else {
      const boxes = focus.map((id) => this.contentBox(id)).filter(Boolean);
      if (boxes.length) {
        first = boxes[0];
        box = union(boxes);
        Object.assign(all, union([all, box])); // a badge may stick out of the drawing's edge
      }
      zoom = Math.max(floor / this.unit, Math.min(fits(box), comfy / this.unit));
    }
    // the middle of the view, in drawing units: the focus's middle; the first focus node whole
    // when the focus is larger than the view; and no blank beyond the drawing's edge
    let cx = (box.x0 + box.x1) / 2;
    let cy = (box.y0 + box.y1) / 2;
    const half = { w: room.w / 2 / zoom, h: room.h / 2 / zoom };
    if (first) {
      cx = clamp(cx, first.x1 - half.w, first.x0 + half.w);
      cy = clamp(cy, first.y1 - half.h, first.y0 + half.h);
    }
    const edge = { w: half.w, h: half.h }; // the view less its padding, in drawing units
    cx = all.x1 - all.x0 > 2 * edge.w ? clamp(cx, all.x0 + edge.w, all.x1 - edge.w) : (all.x0 + all.x1) / 2;
    cy = all.y1 - all.y0 > 2 * edge.h ? clamp(cy, all.y0 + edge.h, all.y1 - edge.h) : (all.y0 + all.y1) / 2;
    this.panZoom.zoom(this.panZoom.getZoom() * (zoom / sizes.realZoom));
    const now = this.panZoom.getSizes().realZoom; // within the library's bounds
    this.panZoom.pan({ x: sizes.width / 2 - cx * now, y: sizes.height / 2 - cy * now });
  }

  /** The window changed size: keep the zoom and pan, just tell the library. */
  resized() {
    this.fitHeight();
    this.panZoom?.resize();
  }

  zoomIn() { this.panZoom?.zoomIn(); }
  zoomOut() { this.panZoom?.zoomOut(); }
  fit() {
    if (!this.panZoom) return;
    this.panZoom.resize();
    this.panZoom.fit();
    this.panZoom.center();
  }

  /** The view a graph opens with: whole if that is readable, else readable from the bottom. */
  initialView() {
    if (!this.panZoom) return;
    this.fit();
    this.notHuge();
    this.readable();
  }

  /** Fitting a small graph would blow it up to poster size: keep its labels at most MAX_LABEL. */
  notHuge() {
    const sizes = this.panZoom.getSizes();
    const most = MAX_LABEL / this.unit;
    if (sizes.realZoom > most) {
      this.panZoom.zoom(this.panZoom.getZoom() * (most / sizes.realZoom));
      this.panZoom.center();
    }
  }

  click(e) {
    if (this.down && Math.hypot(e.clientX - this.down[0], e.clientY - this.down[1]) > 5) return;
    if (this.pick(e.target)) e.preventDefault();
  }

  /** A click or a tap on `target`: its node is chosen, the background clears. */
  pick(target) {
    const g = target.closest && target.closest("g.node");
    if (g && this.nodes.has(g.id)) {
      this.onNode(g.id);
      return true;
    }
    if (this.svg && this.svg.contains(target)) this.onBackground();
    return false;
  }

  key(e) {
    if (this.walk.key(e)) return;
    const g = e.target.closest && e.target.closest("g.node");
    if (g && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      this.onNode(g.id);
    }
  }
}

function badge(x, y, text, cls, scale = 1) {
  return s("g", { class: cls, "aria-hidden": "true" },
    s("circle", { cx: x, cy: y, r: 9 * scale }),
    s("text", { x, y: y + 4 * scale, "text-anchor": "middle", style: `font-size: ${12 * scale}px`, text }));
}

function union(boxes) {
  return { x0: Math.min(...boxes.map((b) => b.x0)), y0: Math.min(...boxes.map((b) => b.y0)),
    x1: Math.max(...boxes.map((b) => b.x1)), y1: Math.max(...boxes.map((b) => b.y1)) };
}

/** A node's own outline (not the badges drawn on it). */
function shapeBox(g) {
  return (g.querySelector("path, polygon, ellipse") || g).getBBox();
}

function clamp(v, lo, hi) {
  return lo > hi ? (lo + hi) / 2 : Math.min(Math.max(v, lo), hi);
}

function describe(node) {
  const parts = [node.label && node.label !== node.name ? `${node.label} (${node.name})` : node.name,
    node.kind];
  if (node.module) parts.push(`module ${node.module}`);
  const at = nodeLineLabel(node);
  if (at) parts.push(at);
  return parts.join(", ");
}
