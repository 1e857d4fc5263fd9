// The page's view state, in one place. The view is what the URL says (permalink.js reads and
// writes its query: run, event, node, layout, ...); this module is how the parts of the page
// that are not the trace page learn of it and change it, without window events:
// - subscribe(listener): told each time the person changes the view (a teacher's class
//   publishes it, classroom.js);
// - apply(view): show a view someone else chose (a student following the teacher) — the page
//   that draws views says how it redraws (onApply), so no popstate has to be forged and the
//   browser's own Back keeps meaning "the last view I had";
// - shown: which run and event the page draws, for the class's questions (classroom.js).

const changed = new Set();
const shownListeners = new Set();
let redraw = null;
let lastShown = null;
// the path a navigation is under way to: a later view of that same page waits for it, since
// the page, once loaded, is sent the class's latest view (a second assign aborted the first
// load: a follower on a busy machine got ERR_ABORTED and no page)
let leavingFor = null;

/** The view now shown: the page's path and its query (without "?"). */
export function current() {
  return { path: location.pathname, query: location.search.replace(/^\?/, "") };
}

/** Tell me when the person changes the view; returns a function that stops telling. */
export function subscribe(listener) {
  changed.add(listener);
  return () => changed.delete(listener);
}

/** Show {path, query}: another page is loaded; on this page the address changes (no history
 *  entry: following is not the student's own navigation) and the page redraws from it. */
export function apply(view) {
  if (!view) return;
  const target = view.path + (view.query ? `?${view.query}` : "");
  if (location.pathname !== view.path) {
    if (leavingFor === view.path) return;
    leavingFor = view.path;
    location.assign(target);
    return;
  }
  if (current().query === (view.query || "")) return;
  history.replaceState(null, "", target);
  if (redraw) redraw();
}

/** The page that draws views says how it redraws after apply() changed its address. */
export function onApply(fn) {
  redraw = fn;
}

/** The page recorded a view the person chose (permalink.js writeUrl). */
export function changedByPerson() {
  const view = current();
  for (const listener of changed) listener(view);
}

/** The page says what it draws ({doc, event, scenario}). */
export function setShown(detail) {
  lastShown = detail;
  for (const listener of shownListeners) listener(detail);
}

/** Tell me what the page draws, now (if it drew anything yet) and on each change. */
export function subscribeShown(listener) {
  shownListeners.add(listener);
  if (lastShown) listener(lastShown);
  return () => shownListeners.delete(listener);
}
