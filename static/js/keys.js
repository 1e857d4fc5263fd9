// The page's keyboard: ← → step the replay (Home/End while replaying), Esc clears, + − 0 zoom.
//
// Who keeps a key (keepsKeys): a text field keeps every key. A choosing control (a variant's
// radio button, a select, a checkbox) keeps its arrow keys (and a select its letters) only when
// the keyboard took the focus there. One the mouse clicked gives them back to the page: a
// teacher who clicked a variant and then pressed → meant the replay, not the next variant, and
// the radio button kept the focus (issue 35). Tab hands the keys back to the control it reaches.

let pointed = null; // the control the pointer pressed last, until Tab moves the focus on
let watching = false;

/** The control an element belongs to (a label's is the input it labels). */
function controlOf(el) {
  const c = el instanceof Element ? el.closest("label, input, select, textarea, button") : null;
  return c && c.tagName === "LABEL" ? c.control : c;
}

/** Remember which control the mouse (or a finger) chose, once per page. */
export function watchPointer() {
  if (watching) return;
  watching = true;
  document.addEventListener("pointerdown", (e) => { pointed = controlOf(e.target); }, true);
  document.addEventListener("keydown", (e) => { if (e.key === "Tab") pointed = null; }, true);
}

// inputs that are not typed into: what is left of <input> is a text field
const NOT_TEXT = new Set(["radio", "checkbox", "button", "submit", "reset", "range", "color", "file", "image"]);

/** A field that is typed into: it keeps every key but Esc in presenter mode (presenter.js). */
export function isTextField(el) {
  if (!(el instanceof Element)) return false;
  if (el.closest("textarea, [contenteditable]:not([contenteditable=false])")) return true;
  return el.tagName === "INPUT" && !NOT_TEXT.has(el.type);
}

/** Whether the element the key went to uses the key itself, so the page must leave it alone. */
export function keepsKeys(el, key) {
  if (isTextField(el)) return true;
  const control = el instanceof Element ? el.closest("input, select") : null;
  if (!control || control === pointed) return false;
  // reached by the keyboard: arrows choose among radios and in a select, letters in a select
  return control.tagName === "SELECT" || /^(Arrow|Home$|End$)/.test(key);
}
//
// The arrows pressed on a node of the graph walk the graph (graph_keys.js) instead.

export function installKeys({ replaying, step, toStep, toEnd, clear, zoomIn, zoomOut, fit, ready }) {
  watchPointer();
  document.addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    if (keepsKeys(e.target, e.key)) return;
    const on = replaying();
    const keys = {
      ArrowRight: () => toStep(on ? step() + 1 : 1),
      ArrowLeft: () => toStep(on ? step() - 1 : 0),
      Home: on ? () => toStep(0) : null,
      End: on ? toEnd : null,
      Escape: clear,
      "+": zoomIn,
      "=": zoomIn,
      "-": zoomOut,
      0: fit,
    };
    const action = keys[e.key];
    if (!action || !ready()) return;
    e.preventDefault();
    action();
  });
}
