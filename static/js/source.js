// The numbered source listing (rendered by the server): which lines made nodes, which line is
// selected, where the run's events were called and where the script failed.

import { h } from "./dom.js";
import { lineLabel } from "./lines.js";

export class SourceView {
  constructor(list, { onLine }) {
    this.list = list;
    this.onLine = onLine;
    this.lines = new Map([...list.querySelectorAll("li[data-line]")].map((li) => [Number(li.dataset.line), li]));
    list.addEventListener("click", (e) => {
      const li = e.target.closest("li[data-line]");
      if (li) onLine(Number(li.dataset.line));
    });
    list.addEventListener("keydown", (e) => {
      const li = e.target.closest("li[data-line]");
      if (li && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        onLine(Number(li.dataset.line));
      }
    });
  }

  /** Mark the lines that made nodes of this event, the lines of the run's events, the error. */
  annotate(event, doc) {
    const counts = new Map();
    for (const n of event ? event.graph.nodes : []) {
      if (n.line) counts.set(n.line, (counts.get(n.line) || 0) + 1);
    }
    for (const [n, li] of this.lines) {
      li.classList.remove("has-nodes", "error-line", "cause-line");
      li.querySelectorAll(".line-tag").forEach((t) => t.remove());
      const count = counts.get(n);
      // the line's code is the button, not the <li>: a list holds list items only, and the
      // button's name begins with what it shows (the code), then what it does
      const code = li.querySelector("code");
      if (count) {
        li.classList.add("has-nodes");
        code.tabIndex = 0;
        code.setAttribute("role", "button");
        code.setAttribute("aria-label", `${code.textContent.trim()} (${lineLabel(n)}: made ${count} node${count > 1 ? "s" : ""})`);
        li.title = `${lineLabel(n)} made ${count} node${count > 1 ? "s" : ""} of this graph: click to see them`;
      } else {
        code.removeAttribute("tabindex");
        code.removeAttribute("role");
        code.removeAttribute("aria-label");
        li.removeAttribute("title");
      }
    }
    for (const e of doc ? doc.events : []) {
      const li = e.line && this.lines.get(e.line);
      if (li) li.append(h("span.line-tag", {}, e.kind === "backward" ? `backward #${e.index}` : `step #${e.index}`));
    }
    const err = doc && doc.error;
    if (err && err.line && this.lines.get(err.line)) {
      const li = this.lines.get(err.line);
      li.classList.add("error-line");
      li.append(h("span.line-tag.error-tag", {}, `error: ${err.type}`));
    }
    // an explained failure: the line that made it, where it differs from where it surfaced
    const cause = err && err.explanation && err.explanation.line;
    if (cause && cause !== err.line && this.lines.get(cause)) {
      const li = this.lines.get(cause);
      li.classList.add("cause-line");
      li.append(h("span.line-tag.error-tag", {}, "the cause"));
    }
  }

  /** The text of a line, as the listing shows it. */
  text(line) {
    const li = this.lines.get(line);
    return li ? li.querySelector("code").textContent : "";
  }

  /** The line a narration's `Show: line TEXT` means: the first line containing TEXT that
   * made nodes in the graph, else the first one outside the Show lines themselves. */
  find(piece) {
    let fallback = null;
    for (const [n, li] of this.lines) {
      const text = li.querySelector("code").textContent;
      if (!text.includes(piece) || /^\s*Show:/.test(text)) continue;
      if (li.classList.contains("has-nodes")) return n;
      fallback = fallback ?? n;
    }
    return fallback;
  }

  /** Highlight one line (or none) and scroll the listing, not the page, to it. */
  select(line) {
    for (const [n, li] of this.lines) li.classList.toggle("line-selected", n === line);
    const li = line && this.lines.get(line);
    if (!li) return;
    const box = this.list.getBoundingClientRect();
    const at = li.getBoundingClientRect();
    if (at.top < box.top || at.bottom > box.bottom) {
      this.list.scrollTop += at.top - box.top - box.height / 3;
    }
  }
}
