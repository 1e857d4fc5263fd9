// The page's state lives in its URL, so that any view can be shared, bookmarked or reloaded:
// the run (variant, device, options) and the view (event, node, parameter, line, replay step,
// heat-map entry, and how a big graph is grouped). Option names are used as they are (?k=2), like the API and the CLI. A stored
// run of your own code has no run settings (it is what ran): its URL holds the view only.

import { changedByPerson } from "./view_state.js";

const VIEW_KEYS = ["event", "node", "param", "line", "step", "cell", "present", "say", "layout",
  "depth", "open", "vs"];
const RUN_KEYS = ["variant", "device"];

/** Read {run, view} from the current URL, given the subject (api.js: its options, default
 *  variant, and whether its run is fixed). */
export function readUrl(subject, search = location.search) {
  const q = new URLSearchParams(search);
  const options = {};
  for (const [key, spec] of Object.entries(subject.options || {})) {
    options[key] = q.has(key) ? q.get(key) : String(spec.default);
  }
  const run = subject.fixed ? { variant: null, device: subject.device || "cpu", options } : {
    variant: q.get("variant") || subject.defaultVariant || null,
    device: q.get("device") || "cpu",
    options,
  };
  const int = (key) => (q.has(key) && /^-?\d+$/.test(q.get(key)) ? Number(q.get(key)) : null);
  const cell = q.get("cell");
  const view = {
    event: int("event"),
    node: q.get("node"),
    param: q.get("param"),
    line: int("line"),
    step: int("step"),
    cell: cell && /^\d+(,\d+)*$/.test(cell) ? cell.split(",").map(Number) : null,
    // presenter mode (trace_page.js) and the narration step it shows, counted from 1
    present: q.get("present") === "1" ? true : null,
    say: int("say"),
    // how a big graph is drawn (app/render/group.py): flat, or by module at a depth with some
    // modules opened; none of these: the server picks a readable grouping
    layout: ["flat", "modules"].includes(q.get("layout")) ? q.get("layout") : null,
    depth: int("depth"),
    open: q.get("open") ? q.get("open").split(",").filter(Boolean).slice(0, 200).map(unescapePath) : null,
    // a parameter's .grad compared after two backward passes (grad_compare.js): "0,2"
    vs: /^\d+,\d+$/.test(q.get("vs") || "") ? q.get("vs").split(",").map(Number) : null,
  };
  return { run, view };
}

/** The URL of a run and view (relative to this page). */
export function viewUrl(subject, run, view) {
  const q = new URLSearchParams();
  if (!subject.fixed) {
    for (const key of RUN_KEYS) if (run[key]) q.set(key, run[key]);
    for (const [k, v] of Object.entries(run.options || {})) q.set(k, v);
  }
  for (const key of VIEW_KEYS) {
    const value = view[key];
    if (value === null || value === undefined || value === false) continue;
    const list = key === "open" && Array.isArray(value) ? value.map(escapePath) : value;
    q.set(key, Array.isArray(list) ? list.join(",") : value === true ? "1" : String(value));
  }
  // commas are fine in a query and keep "cell=2,3" readable when the link is pasted somewhere
  const query = q.toString().replace(/%2C/gi, ",");
  return query ? `${location.pathname}?${query}` : location.pathname;
}

/** Record the view in the address bar; a new run gets a history entry, a new view does not. */
export function writeUrl(url, { newEntry = false } = {}) {
  if (url === location.pathname + location.search) return;
  if (newEntry) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
  changedByPerson(); // a teacher's class follows (classroom.js, through view_state.js)
}

// module paths in `open` are joined by commas, and a module's name may hold one
function escapePath(path) {
  return path.replaceAll("%", "%25").replaceAll(",", "%2C");
}

function unescapePath(path) {
  return path.replaceAll("%2C", ",").replaceAll("%25", "%");
}
