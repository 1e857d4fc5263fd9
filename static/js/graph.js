// The server-rendered SVG of one backward graph, inlined so that its nodes can be clicked.
// Graphviz gives every node <g> the Trace node id and every edge <g> the id e-SOURCE-TARGET-SLOT
// (app/render/dot.py), so the page goes from a drawing to the Trace record and back by id.
// Highlights are CSS classes only; how they look (thickness, dashes, not just hue) is in app.css.

import { s } from "./dom.js";
import { touchGestures } from "./touch.js";

// Graphviz labels are 11 units high: fitted below LEGIBLE they cannot be read on a projector,
// and then the graph opens at READABLE instead (the Fit button still shows it whole).
const LEGIBLE = 0.75;
const READABLE = 0.95;
// fitted to its width below this, a graph is a speck (every node of a big model): it opens at
// READABLE on its output instead
const UNREADABLE = 0.25;
const MAX_FIT = 1.6;
const MIN_HEIGHT = 420;
const STATE_CLASSES = ["is-selected", "is-line", "is-current", "is-done", "is-pending",
  "is-contrib", "is-hinted", "is-edge-done", "is-edge-new"];

export class GraphView {
  constructor(container, { onNode, onBackground }) {
    this.container = container;
    this.onNode = onNode;
    this.onBackground = onBackground;
    this.svg = null;
    this.panZoom = null;
    this.nodes = new Map(); // id -> <g>
    this.edges = new Map(); // edge id -> {g, edge}
    this.down = null;
    // A drag that pans the graph must not also count as a click on the node under it.
    container.addEventListener("pointerdown", (e) => { this.down = [e.clientX, e.clientY]; }, true);
    container.addEventListener("click", (e) => this.click(e));
    container.addEventListener("keydown", (e) => this.key(e));
  }

  /** Size the drawing area to the rest of the first screen, so the page opens with the whole
   * graph area in view (a projector has no room to spare); never below MIN_HEIGHT. */
  fitHeight() {
    const top = this.container.getBoundingClientRect().top + window.scrollY;
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
    const byId = new Map(event.graph.nodes.map((n) => [n.id, n]));
    for (const node of event.graph.nodes) {
      const g = svg.getElementById(node.id);
      if (!g) continue;
      this.nodes.set(node.id, g);
      g.setAttribute("tabindex", "0");
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
    if (window.svgPanZoom) {
      this.panZoom = window.svgPanZoom(svg, {
        fit: true, center: true, minZoom: 0.1, maxZoom: 25, zoomScaleSensitivity: 0.3,
        dblClickZoomEnabled: false, controlIconsEnabled: false,
        customEventsHandler: touchGestures({ onTap: (target) => this.pick(target) }),
      });
      // a huge graph fits at a tiny zoom: let it still be zoomed in far enough to read
      const fitted = this.panZoom.getSizes().realZoom;
      if (fitted * 25 < 4 * READABLE) this.panZoom.setMaxZoom((4 * READABLE) / fitted);
      this.notHuge();
      this.readable();
    }
  }

  /** A tall graph fitted whole has unreadable labels on a projector: then zoom in to READABLE
   * (or the full width), and show the bottom, where the output is and backward starts. */
  readable() {
    const sizes = this.panZoom.getSizes();
    if (sizes.realZoom >= LEGIBLE) return;
    const widthZoom = sizes.width / (sizes.viewBox.width || 1);
    if (widthZoom < UNREADABLE) {
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
        panZoom.zoomAtPoint(panZoom.getZoom() * (READABLE / drawn), point);
        // the output in the middle of the visible area
        const seen = this.container.getBoundingClientRect();
        panZoom.panBy({ x: seen.left - area.left + seen.width / 2 - point.x,
          y: seen.top - area.top + seen.height * 0.5 - point.y });
      }));
      return;
    }
    const target = Math.min(READABLE, widthZoom);
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
      const box = g.getBBox();
      g.append(badge(box.x + box.width - 2, box.y + 2, level === "info" ? "i" : "!", `badge diag-badge badge-${level}`));
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
    for (const [id, number] of contrib) {
      const g = this.nodes.get(id);
      if (!g) continue;
      const box = g.getBBox();
      g.append(badge(box.x + 2, box.y + 2, String(number), "badge use-badge"));
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
    // svg-pan-zoom applies zoom and pan on the next animation frame: measure after it
    requestAnimationFrame(() => requestAnimationFrame(() => this.revealNow(id)));
  }

  revealNow(id) {
    const g = this.nodes.get(id);
    if (!g || !this.panZoom) return;
    const box = g.getBoundingClientRect();
    const rect = this.container.getBoundingClientRect();
    // the part of the graph area actually on screen (the page may be scrolled, or be taller)
    const top = Math.max(rect.top, 0);
    const bottom = Math.min(rect.bottom, window.innerHeight);
    const view = { left: rect.left, right: rect.right, width: rect.width, top, bottom,
      height: Math.max(bottom - top, 40) };
    const inside = box.left >= view.left && box.right <= view.right &&
      box.top >= view.top && box.bottom <= view.bottom;
    if (inside) return;
    this.panZoom.panBy({
      x: view.left + view.width / 2 - (box.left + box.width / 2),
      y: view.top + view.height / 2 - (box.top + box.height / 2),
    });
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

  /** Fitting a small graph would blow it up to poster size: keep it at most MAX_FIT. */
  notHuge() {
    const sizes = this.panZoom.getSizes();
    if (sizes.realZoom > MAX_FIT) {
      this.panZoom.zoom(this.panZoom.getZoom() * (MAX_FIT / sizes.realZoom));
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
    const g = e.target.closest && e.target.closest("g.node");
    if (g && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      this.onNode(g.id);
    }
  }
}

function badge(x, y, text, cls) {
  return s("g", { class: cls, "aria-hidden": "true" },
    s("circle", { cx: x, cy: y, r: 9 }),
    s("text", { x, y: y + 4, "text-anchor": "middle", text }));
}

function describe(node) {
  const parts = [node.label && node.label !== node.name ? `${node.label} (${node.name})` : node.name,
    node.kind];
  if (node.module) parts.push(`module ${node.module}`);
  if (node.line) parts.push(`line ${node.line}`);
  return parts.join(", ");
}
