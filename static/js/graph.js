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
// an opening view zooms out at most this much (and never below its labels' floor) to show its
// rows' nodes whole, none cut by the view's side; a graph wider than that is a pan away
const TIDY = 0.7;
/** A phone: the page's one test for it (a details sheet over the graph, a strip to scroll by). */
export const phone = window.matchMedia("(max-width: 600px)");
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
    const most = phone.matches ? window.innerHeight * 0.7 : Infinity;
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
    this.makeBadgeLayer();
    this.addDiagnosticBadges(event, diagnostics, byId);
    this.addHookBadges(event);
    if (window.svgPanZoom) {
      this.panZoom = window.svgPanZoom(svg, {
        fit: true, center: true, minZoom: 0.1, maxZoom: 25, zoomScaleSensitivity: 0.3,
        dblClickZoomEnabled: false, controlIconsEnabled: false,
        customEventsHandler: touchGestures({ onTap: (target) => this.pick(target) }),
        // the person moved the view (not the page opening it): a resize keeps their view
        onPan: () => { if (!this.opening) this.moved = true; },
        onZoom: () => { if (!this.opening) this.moved = true; },
      });
      // a huge graph fits at a tiny zoom: let it still be zoomed in far enough to read (a
      // projector's 30 px labels on a small graph too)
      const fitted = this.panZoom.getSizes().realZoom;
      const most = (4 * READABLE) / this.unit;
      if (fitted * 25 < most) this.panZoom.setMaxZoom(most / fitted);
      this.opening = true; // the view the drawing opens with: not the person's move
      try {
        this.notHuge();
        this.readable();
      } finally {
        this.opening = false;
      }
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
        const moved = this.moved; // this is the opening view, not the person's move
        panZoom.zoomAtPoint(panZoom.getZoom() * (READABLE / this.unit / drawn), point);
        // the output in the middle of the visible area
        const seen = this.container.getBoundingClientRect();
        panZoom.panBy({ x: seen.left - area.left + seen.width / 2 - point.x,
          y: seen.top - area.top + seen.height * 0.5 - point.y });
        this.moved = moved;
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
      // on the node's top right corner, clear of its label
      this.placeBadge(id, ["top-right", "bottom-right", "top-left", "bottom-left"], level === "info" ? "i" : "!",
        `badge diag-badge badge-${level}`);
    }
  }

  /** A node the script's hooks ran on in this pass: a small "h" on its bottom right corner
   *  (the node panel lists them with their call counts). */
  addHookBadges(event) {
    for (const [id, count] of hookCounts(event)) {
      if (!this.nodes.has(id)) continue;
      // beside the node, not inside it, as the use badges are (axe: its read name)
      const mark = this.placeBadge(id, ["bottom-right", "bottom-left", "top-right", "top-left"], "h", "badge hook-badge");
      mark.dataset.hooks = String(count);
    }
  }

  /** The layer the badges are drawn in: the last thing in the drawing, so that no node is
   *  painted over a badge (a badge drawn after its own node was hidden under the next one). */
  makeBadgeLayer() {
    const root = this.svg.querySelector("g.graph") || this.svg.querySelector("g");
    this.badges = s("g", { class: "badges" });
    (root || this.svg).append(this.badges);
    this.placed = [];
    // every node's outline, in the drawing's units: a badge goes where it covers none of them
    this.outlines = [...this.nodes].map(([id, g]) => ({ id, box: toEdges(shapeBox(g)) }));
  }

  /** A badge for node `id`, at the first of `corners` where it covers no other node and no
   *  other badge (else where it covers least). Returns it; its data-node names the node. */
  placeBadge(id, corners, text, cls) {
    const k = this.unit / BASE_UNIT;
    const b = shapeBox(this.nodes.get(id));
    const r = 11 * k; // the badge's radius, its stroke and a little air
    const spots = { "top-left": [b.x - 7 * k, b.y + 2 * k], "top-right": [b.x + b.width + 7 * k, b.y + 2 * k],
      "bottom-left": [b.x - 7 * k, b.y + b.height - 2 * k], "bottom-right": [b.x + b.width + 7 * k, b.y + b.height - 2 * k],
      // further out, beside the middle of a side: where two nodes' corners crowd each other
      "left": [b.x - r, b.y + b.height / 2], "right": [b.x + b.width + r, b.y + b.height / 2],
      "above": [b.x + b.width / 2, b.y - r], "below": [b.x + b.width / 2, b.y + b.height + r] };
    let best = null;
    for (const name of [...corners, "left", "right", "above", "below"]) {
      const [x, y] = spots[name];
      const box = { x0: x - r, y0: y - r, x1: x + r, y1: y + r };
      const covered = this.outlines.filter((o) => o.id !== id).map((o) => overlap(box, o.box))
        .concat(this.placed.map((p) => overlap(box, p.box))).reduce((a, v) => a + v, 0);
      if (!best || covered < best.covered) best = { x, y, box, covered };
      if (!covered) break;
    }
    const mark = badge(best.x, best.y, text, cls, k);
    mark.dataset.node = id;
    this.badges.append(mark);
    this.placed.push({ mark, box: best.box });
    return mark;
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
    }
    this.svg?.querySelectorAll(".use-badge").forEach((b) => b.remove());
    this.placed = (this.placed || []).filter((p) => p.mark.isConnected);
    this.walk.follow(selected);
    for (const [id, number] of contrib) {
      if (!this.nodes.has(id)) continue;
      // on the node's top left corner, clear of its label; beside the node, not inside it: a
      // number in the node would be part of its name on screen but not of the name it is read
      // by (axe: label-content-name-mismatch)
      this.placeBadge(id, ["top-left", "bottom-left", "top-right", "bottom-right"], String(number), "badge use-badge");
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
   * then at least `floor` px on screen; else `focus` (node ids) at labels of `floor` px or more
   * (up to `comfy` when it fits at that), the rest of the graph a pan away. Never blown up past
   * `most` px. `must` (node ids; by default the first of `focus`) are the nodes the view is
   * about: each lies whole, with its badges, inside the part of the graph area that is seen
   * (a phone's sheet covers its bottom), even where that takes labels below `floor`.
   * Returns how many nodes the view's left and right sides cut.
   */
  open(options = {}) {
    this.opening = true;
    let cut = 0;
    try {
      cut = this.openNow(options) || 0;
    } finally {
      this.opening = false;
    }
    this.moved = false;
    return cut;
  }

  openNow({ focus = [], must = focus.slice(0, 1), floor = 12, comfy = floor * 1.25, most = floor * 1.6 } = {}) {
    if (!this.panZoom) return;
    this.panZoom.resize();
    const sizes = this.panZoom.getSizes();
    const vb = sizes.viewBox;
    const all = { x0: vb.x, y0: vb.y, x1: vb.x + vb.width, y1: vb.y + vb.height };
    // the part of the drawing area that is seen, in px from the drawing's top left
    const area = this.svg.getBoundingClientRect();
    const seenHeight = Math.min(sizes.height, this.coveredFrom() - area.top);
    const height = seenHeight >= Math.min(120, sizes.height) ? seenHeight : sizes.height;
    const room = { w: Math.max(sizes.width - 2 * PAD, 40), h: Math.max(height - 2 * PAD, 40) };
    const fits = (b) => Math.min(room.w / (b.x1 - b.x0 || 1), room.h / (b.y1 - b.y0 || 1));
    const boxes = (ids) => ids.map((id) => this.nodeBox(id)).filter(Boolean);
    const needed = boxes(must);
    const whole = needed.length ? union(needed) : null;
    let zoom = fits(all);
    let box = all;
    if (zoom * this.unit >= floor) {
      zoom = Math.min(zoom, most / this.unit);
    } else {
      const wanted = boxes(focus).concat(needed);
      if (wanted.length) box = union(wanted);
      zoom = Math.max(floor / this.unit, Math.min(fits(box), comfy / this.unit));
    }
    if (whole) {
      Object.assign(all, union([all, whole])); // a badge may stick out of the drawing's edge
      zoom = Math.min(zoom, fits(whole)); // what the view is about is seen whole, first
    }
    // the middle of the view, in drawing units: the focus's middle, moved as little as keeps
    // the nodes it must show whole, and no blank beyond the drawing's edge
    const half = { w: room.w / 2 / zoom, h: room.h / 2 / zoom };
    const centre = (lo, hi, want, mlo, mhi, h) => {
      let c = want;
      if (whole) c = clamp(c, mhi - h, mlo + h);
      if (hi - lo <= 2 * h) return (lo + hi) / 2;
      // within the drawing's edges, as long as that keeps what must be seen in the view
      const a = whole ? Math.max(lo + h, mhi - h) : lo + h;
      const b = whole ? Math.min(hi - h, mlo + h) : hi - h;
      return a <= b ? clamp(c, a, b) : c;
    };
    let cx = centre(all.x0, all.x1, (box.x0 + box.x1) / 2, whole?.x0, whole?.x1, half.w);
    let cy = centre(all.y0, all.y1, (box.y0 + box.y1) / 2, whole?.y0, whole?.y1, half.h);
    // no node cut in half by the view's side: where the nodes of the rows on show are a little
    // wider than the view (a third column's node sticking out), zoom out to take them in
    const outlines = [...this.nodes.keys()].map((id) => this.nodeBox(id)).filter(Boolean);
    let tidy = { zoom, cx, cy };
    for (let round = 0; round < 4; round++) {
      const hh = room.h / 2 / tidy.zoom;
      const rows = outlines.filter((o) => o.y1 > tidy.cy - hh && o.y0 < tidy.cy + hh);
      const span = rows.length ? union(rows) : null;
      const wider = span ? fits({ x0: span.x0, x1: span.x1, y0: 0, y1: 0 }) : Infinity;
      if (wider >= tidy.zoom) {
        // every row's nodes fit across: the view takes this zoom (if it had to zoom out)
        if (tidy.zoom < zoom) {
          zoom = tidy.zoom;
          half.w = room.w / 2 / zoom;
          half.h = room.h / 2 / zoom;
          cx = centre(all.x0, all.x1, tidy.cx, whole?.x0, whole?.x1, half.w);
          cy = centre(all.y0, all.y1, tidy.cy, whole?.y0, whole?.y1, half.h);
        }
        break;
      }
      // far wider than the view: a pan away, as it was; and never below the labels' floor
      if (wider < Math.max(zoom * TIDY, floor / this.unit)) break;
      tidy = { zoom: wider, cx: (span.x0 + span.x1) / 2, cy };
    }
    // and as few as can be cut by its sides, then by its top or bottom: the view moved as
    // little as takes a node in or out, keeping what must be seen (and the focus, if it was
    // seen) whole
    const air = PAD / zoom;
    const aimed = boxes(focus);
    // what must be seen, the focus as a whole and each of its nodes: none of it less seen
    const kept = (a0, a1) => [whole, box, ...aimed]
      .filter(Boolean).map((k) => [k[a0], k[a1]]);
    if (all.x1 - all.x0 > 2 * half.w) {
      const rows = outlines.filter((o) => o.y1 > cy - half.h && o.y0 < cy + half.h).map((o) => [o.x0, o.x1]);
      cx = leastCut(cx, half.w, rows, kept("x0", "x1"), [all.x0, all.x1], air);
    }
    if (all.y1 - all.y0 > 2 * half.h) {
      const columns = outlines.filter((o) => o.x1 > cx - half.w && o.x0 < cx + half.w).map((o) => [o.y0, o.y1]);
      cy = leastCut(cy, half.h, columns, kept("y0", "y1"), [all.y0, all.y1], air);
    }
    this.panZoom.zoom(this.panZoom.getZoom() * (zoom / sizes.realZoom));
    const now = this.panZoom.getSizes().realZoom; // within the library's bounds
    this.panZoom.pan({ x: sizes.width / 2 - cx * now, y: height / 2 - cy * now });
    // the nodes the view's sides cut (its edges, not the room kept free inside them), for a
    // caller that can make the graph area wider
    const edge = { w: sizes.width / 2 / now, h: height / 2 / now };
    return outlines.filter((o) => o.y1 > cy - edge.h && o.y0 < cy + edge.h &&
      ((o.x0 < cx - edge.w && o.x1 > cx - edge.w) || (o.x0 < cx + edge.w && o.x1 > cx + edge.w))).length;
  }

  /** A node's box with its badges, in the drawing's units (contentBox). */
  nodeBox(id) {
    const box = this.contentBox(id);
    if (!box || !this.badges) return box;
    const marks = [...this.badges.children].filter((m) => m.dataset.node === id).map((m) => this.contentBox(m));
    return union([box, ...marks.filter(Boolean)]);
  }

  /** Whether the person has panned or zoomed since the graph was last given its opening view
   *  (a window's new size opens it again only if not: trace_page.js). */
  untouched() {
    return Boolean(this.panZoom) && !this.moved;
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
    this.opening = true;
    try {
      this.fit();
      this.notHuge();
      this.readable();
    } finally {
      this.opening = false;
    }
    this.moved = false;
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
    // a badge stands for its node (it is drawn in a layer of its own, over the nodes)
    const id = g ? g.id : target.closest && target.closest("g.badge")?.dataset.node;
    if (id && this.nodes.has(id)) {
      this.onNode(id);
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

/** The middle, near `c`, of a view `2h` long on one axis that cuts fewest of `spans` ([from,
 *  to]) at its ends, showing no less of each of `kept` than the view at `c` does and itself
 *  within `edge`; moved at most `h`, leaving `air` between a node taken in or pushed out and
 *  the view's end. */
function leastCut(c, h, spans, kept, edge, air) {
  const cut = (v) => spans.filter(([a, b]) => (a < v - h && b > v - h) || (a < v + h && b > v + h)).length;
  const seen = (v, [a, b]) => Math.max(0, Math.min(b, v + h) - Math.max(a, v - h));
  const ok = (v) => v - h >= edge[0] - air && v + h <= edge[1] + air &&
    kept.every((k) => seen(v, k) >= seen(c, k) - 1e-6);
  let best = { v: c, n: cut(c) };
  for (const [a, b] of best.n ? spans : []) {
    for (const v of [a - air + h, b + air - h, a - air - h, b + air + h]) {
      if (!ok(v) || Math.abs(v - c) > h) continue;
      const n = cut(v);
      if (n < best.n || (n === best.n && Math.abs(v - c) < Math.abs(best.v - c))) best = { v, n };
    }
  }
  return best.v;
}

function toEdges(b) {
  return { x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height };
}

function overlap(a, b) {
  return Math.max(0, Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0)) * Math.max(0, Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0));
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
