// The graph walked by keyboard. The drawing is one stop in the Tab order (a roving tabindex: one
// node has tabindex 0, every other -1), so a parameter is a Tab and a few arrows away, not 38
// Tabs in drawing order. Inside it the arrows follow the drawn edges:
//   ↑ towards the output (the nodes this one feeds, where backward starts: the loss),
//   ↓ towards the inputs (the nodes this one sends gradients to),
//   ← → among siblings: the other nodes reached from the node last walked from, in the
//       direction walked (a use's other uses, an op's other inputs), else the same rank,
//       in the order they are drawn, left to right.
// The graph pans to the node that gets focus (graph.js revealNow), and a focus ring drawn here
// (black on a white halo, thick on screen whatever the zoom) marks it on every node kind.
// `F`, anywhere on the page, moves focus to the findings ("What to notice").

import { s } from "./dom.js";

// the drawing has the output (the loss) at the bottom and the parameters at the top: ↓ walks
// towards the output, down the screen, and ↑ towards the inputs, up it
const TOWARDS = { ArrowDown: "out", ArrowUp: "in" };
const ASIDE = { ArrowLeft: -1, ArrowRight: 1 };
// where the `F` key takes focus: the first of these shown on the page
// (the strip above the graph, findings.js, is on the first screen; the list is further down)
const FINDINGS = ["#findings .finding-pick", "#diagnostics h2"];
// px a focused node is kept clear of the graph area's edges: its ring is seen whole
const RING_ROOM = 16;

export class GraphWalk {
  /** `view`: the GraphView whose drawing is walked (its nodes, svg, revealNow, contentBox). */
  constructor(view) {
    this.view = view;
    this.out = new Map(); // node id -> ids it feeds (towards the output)
    this.in = new Map(); // node id -> ids it takes gradients to (towards the inputs)
    this.stop = null; // the node with tabindex 0
    this.from = null; // {id, dir}: the node last walked from, and which way
    this.moved = null; // the node this walk focused (a Tab or a click starts afresh)
    this.ring = null;
    view.container.addEventListener("focusin", (e) => this.focused(e));
    view.container.addEventListener("focusout", (e) => this.left(e));
  }

  /** A new drawing: read its edges, and make it one Tab stop. */
  drawn(svg) {
    this.out.clear();
    this.in.clear();
    this.stop = null;
    this.from = null;
    this.moved = null;
    this.ring = null;
    const known = (id) => {
      if (this.view.nodes.has(id)) return id;
      // a big graph draws a shared leaf again beside each use (app/render/dot.py `-useN`)
      const copy = id.match(/^(.*)-use\d+$/);
      return copy && this.view.nodes.has(copy[1]) ? copy[1] : null;
    };
    for (const edge of svg.querySelectorAll("g.edge.grad-edge")) {
      // graphviz titles an edge "SOURCE->TARGET"; a gradient edge runs from the input side
      // (source) to the node it feeds (target), as the Trace's edges do
      const title = edge.querySelector("title");
      const [a, b] = (title ? title.textContent : "").split("->").map((x) => known(x.trim()));
      if (!a || !b || a === b) continue;
      link(this.out, a, b);
      link(this.in, b, a);
    }
    for (const g of this.view.nodes.values()) g.setAttribute("tabindex", "-1");
    const output = svg.querySelector("g.node.kind-output");
    this.setStop(output && this.view.nodes.has(output.id) ? output.id : this.view.nodes.keys().next().value);
    // the container is no Tab stop of its own while there are nodes to go to
    this.view.container.tabIndex = this.stop ? -1 : 0;
    svg.setAttribute("aria-label", `${svg.getAttribute("aria-label")}. Arrow keys walk it: down towards ` +
      "the output, up towards the inputs, left and right among siblings");
  }

  /** The drawing is gone. */
  cleared() {
    this.stop = null;
    this.ring = null;
    this.view.container.tabIndex = 0;
  }

  /** The node picked some other way (a click, the parameter list): Tab comes back to it. */
  follow(id) {
    if (id && this.view.nodes.has(id) && !this.view.container.contains(document.activeElement)) this.setStop(id);
  }

  setStop(id) {
    if (!id) return;
    if (this.stop && this.stop !== id) this.view.nodes.get(this.stop)?.setAttribute("tabindex", "-1");
    this.stop = id;
    this.view.nodes.get(id)?.setAttribute("tabindex", "0");
  }

  /** An arrow on a focused node: true when it was taken (the page's own arrows then wait). */
  key(e) {
    const g = e.target.closest && e.target.closest("g.node");
    if (!g || !this.view.nodes.has(g.id) || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return false;
    let next = null;
    if (TOWARDS[e.key]) next = this.along(g.id, TOWARDS[e.key]);
    else if (ASIDE[e.key]) next = this.aside(g.id, ASIDE[e.key]);
    else return false;
    e.preventDefault();
    e.stopPropagation();
    if (next) this.go(next.id, next.from);
    return true;
  }

  /** One step along the edges: back to where the walk came from if that is this way, else the
   * nearest drawn neighbour. */
  along(id, dir) {
    const ahead = [...((dir === "out" ? this.out : this.in).get(id) || [])];
    if (!ahead.length) return null;
    const back = this.from && this.from.dir !== dir && ahead.includes(this.from.id) ? this.from.id : null;
    const here = this.centre(id);
    const nearest = back || ahead.map((n) => [n, distance(here, this.centre(n))])
      .sort((a, b) => a[1] - b[1])[0][0];
    return { id: nearest, from: { id, dir } };
  }

  /** The sibling `step` places left (-1) or right (+1) of this node, in drawing order. */
  aside(id, step) {
    let group = [];
    if (this.from) group = [...((this.from.dir === "out" ? this.out : this.in).get(this.from.id) || [])];
    if (group.length < 2 || !group.includes(id)) group = this.sameRank(id);
    const order = group.map((n) => [n, this.centre(n)]).filter(([, c]) => c)
      .sort((a, b) => a[1].x - b[1].x || a[1].y - b[1].y).map(([n]) => n);
    const at = order.indexOf(id);
    const next = order[at + step];
    return at < 0 || !next ? null : { id: next, from: this.from };
  }

  /** The nodes drawn on this node's rank: their middles level with its middle. */
  sameRank(id) {
    const box = this.view.contentBox(id);
    if (!box) return [];
    const y = (box.y0 + box.y1) / 2;
    const half = (box.y1 - box.y0) / 2;
    return [...this.view.nodes.keys()].filter((n) => {
      const c = this.centre(n);
      return c && Math.abs(c.y - y) <= half;
    });
  }

  centre(id) {
    const box = this.view.contentBox(id);
    return box ? { x: (box.x0 + box.x1) / 2, y: (box.y0 + box.y1) / 2 } : null;
  }

  go(id, from) {
    this.from = from;
    this.moved = id;
    // the browser would scroll the clipped graph box to a node outside it: the pan does instead
    this.view.nodes.get(id).focus({ preventScroll: true });
  }

  focused(e) {
    const g = e.target.closest && e.target.closest("g.node");
    if (!g || !this.view.nodes.has(g.id)) return;
    if (this.moved !== g.id) this.from = null; // come by Tab or a click: no walk to go back on
    this.moved = null;
    this.setStop(g.id);
    // a Tab's focus scrolls the clipped box, and the page, to a node drawn outside the view:
    // the drawing is placed by the pan only, and the page shows the whole graph area (it is
    // sized to fit the screen: graph.js fitHeight), then the pan brings the node into it
    this.view.container.scrollTop = 0;
    this.view.container.scrollLeft = 0;
    this.view.container.scrollIntoView({ block: "nearest", inline: "nearest" });
    this.drawRing(g);
    this.view.revealNow(g.id, RING_ROOM);
  }

  left(e) {
    if (this.ring && !this.view.container.contains(e.relatedTarget)) {
      this.ring.remove();
      this.ring = null;
    }
  }

  /** A ring around the node's shape, clear of it: a white halo under a black line, both kept
   * the same width on screen at any zoom (app.css .focus-ring). It is drawn just after the node,
   * not in it, so that a node faded by the replay does not fade its ring; graphviz draws every
   * node in the drawing's own units, so the node's box is the ring's. */
  drawRing(g) {
    this.ring?.remove();
    const shape = g.querySelector("path, polygon, ellipse") || g;
    const b = shape.getBBox();
    const pad = 5 * (this.view.unit / 14);
    const box = { x: b.x - pad, y: b.y - pad, width: b.width + 2 * pad, height: b.height + 2 * pad, rx: pad };
    this.ring = s("g", { class: "focus-ring", "aria-hidden": "true" },
      s("rect", { class: "focus-halo", ...box }), s("rect", { class: "focus-line", ...box }));
    g.after(this.ring);
  }
}

/** `F`: focus on the findings, scrolled into view; said aloud when there are none to show. */
export function installFindingsKey() {
  document.addEventListener("keydown", (e) => {
    if (e.key !== "f" && e.key !== "F") return;
    if (e.altKey || e.ctrlKey || e.metaKey || e.target.closest("input, select, textarea, [contenteditable]")) return;
    e.preventDefault();
    const target = FINDINGS.map((sel) => document.querySelector(sel)).find((el) => el && el.checkVisibility());
    if (!target) {
      say("This run has no findings to show.");
      return;
    }
    if (!target.hasAttribute("tabindex")) target.tabIndex = -1;
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "nearest" });
  });
}

/** A sentence for screen readers only. */
function say(text) {
  let box = document.getElementById("keys-said");
  if (!box) {
    box = document.createElement("p");
    box.id = "keys-said";
    box.className = "sr-only";
    box.setAttribute("aria-live", "polite");
    document.body.append(box);
  }
  box.textContent = text;
}

function link(map, a, b) {
  if (!map.has(a)) map.set(a, new Set());
  map.get(a).add(b);
}

function distance(a, b) {
  return a && b ? Math.hypot(a.x - b.x, a.y - b.y) : Infinity;
}
