// The page's only way to the server: the JSON API under /api. Every error becomes an ApiError
// whose message is the server's `detail`, written for a person to act on.

/** The Trace format this page understands (app/trace/trace.schema.json). */
export const TRACE_FORMAT = "autograd-lab/trace@1";

export class ApiError extends Error {
  constructor(status, message, { retryAfter = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.retryAfter = retryAfter; // seconds, when the server is busy (503)
  }
}

export class FormatError extends Error {
  constructor(found) {
    super(`This page reads Trace documents of format “${TRACE_FORMAT}”, but the server sent ` +
      `“${found ?? "no format at all"}”. The server and the page are from different versions: ` +
      "reload the page; if that does not help, the server needs updating.");
    this.name = "FormatError";
  }
}

/** Query string for one run: variant, device and the scenario's options. */
export function runQuery(run, extra = {}) {
  const q = new URLSearchParams();
  if (run.variant) q.set("variant", run.variant);
  q.set("device", run.device || "cpu");
  for (const [k, v] of Object.entries(run.options || {})) q.set(k, v);
  for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) q.set(k, v);
  return q.toString();
}

/**
 * Where a page's Trace and drawings come from. A scenario is run with the page's settings
 * (variant, device, options); a stored run is fixed: it is what ran, and has no settings.
 */
/** The query of one drawing: which event, how it is grouped ({layout, depth, open}), and its
 *  label type (`font`, 1 to 3 times the 1x type of exports and the CLI). */
function drawingQuery(event, drawing = {}) {
  const q = new URLSearchParams();
  if (event !== null && event !== undefined) q.set("event", event);
  if (drawing.layout) q.set("layout", drawing.layout);
  if (drawing.depth !== null && drawing.depth !== undefined) q.set("depth", drawing.depth);
  for (const path of drawing.open || []) q.append("open", path);
  if (drawing.font && drawing.font !== 1) q.set("font", drawing.font);
  return q;
}

export function scenarioSubject(scenario) {
  const base = `/api/scenarios/${encodeURIComponent(scenario.name)}`;
  return {
    fixed: false,
    name: scenario.name,
    options: scenario.options || {},
    defaultVariant: scenario.default_variant || null,
    traceUrl: (run) => `${base}/trace?${runQuery(run)}`,
    graphUrl: (run, event, fmt = "svg", drawing = {}) => {
      const q = drawingQuery(event, drawing);
      return `${base}/graph.${fmt}?${runQuery(run)}${q.toString() ? `&${q}` : ""}`;
    },
    viewUrl: (run, view, fmt = "svg") => `${base}/graph.${fmt}?${runQuery(run, { view })}`,
    flowUrl: (run) => `${base}/gradient-flow?${runQuery(run)}`,
  };
}

export function storedSubject(stored) {
  const base = `/api/runs/${encodeURIComponent(stored.id)}`;
  return {
    fixed: true,
    name: stored.name.replace(/\.py$/, ""),
    options: {},
    defaultVariant: null,
    device: stored.device,
    traceUrl: () => base,
    graphUrl: (run, event, fmt = "svg", drawing = {}) => {
      const q = drawingQuery(event, drawing).toString();
      return `${base}/graph.${fmt}${q ? `?${q}` : ""}`;
    },
    viewUrl: (run, view, fmt = "svg") => `${base}/graph.${fmt}?view=${view}`,
    flowUrl: () => `${base}/gradient-flow`,
  };
}

export function traceUrl(name, run) {
  return scenarioSubject({ name }).traceUrl(run);
}

export function graphUrl(name, run, event, fmt = "svg") {
  return scenarioSubject({ name }).graphUrl(run, event, fmt);
}

// the one place the page calls fetch: a server that does not answer is one ApiError for all
async function send(url, { signal, as = "json", method = "GET", body, headers = {} } = {}) {
  try {
    return await fetch(url, { signal, method, body, headers: { Accept: as === "json" ? "application/json" : "*/*", ...headers } });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "The server did not answer. Is `autograd-lab serve` still running?");
  }
}

async function request(url, { signal, as = "json", method = "GET", body, headers = {} } = {}) {
  const response = await send(url, { signal, as, method, body, headers });
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (typeof body.detail === "string") detail = body.detail;
    } catch { /* not JSON: keep the status line */ }
    const retry = Number(response.headers.get("Retry-After"));
    throw new ApiError(response.status, detail, { retryAfter: Number.isFinite(retry) && retry > 0 ? retry : null });
  }
  return as === "json" ? response.json() : response.text();
}

function checked(doc) {
  if (!doc || doc.format !== TRACE_FORMAT) throw new FormatError(doc && doc.format);
  return doc;
}

/** The Trace of one run; refuses a document whose format this page does not know.
 *  `subject` is a scenario subject, a stored run's, or a scenario's name. */
export async function fetchTrace(subject, run, { signal } = {}) {
  const s = typeof subject === "string" ? scenarioSubject({ name: subject }) : subject;
  return checked(await request(s.traceUrl(run), { signal }));
}

export function fetchGraphSvg(subject, run, event, { signal, drawing = {} } = {}) {
  const s = typeof subject === "string" ? scenarioSubject({ name: subject }) : subject;
  return request(s.graphUrl(run, event, "svg", drawing), { signal, as: "text" });
}

/** How a drawing is grouped: {grouping: {flat, depth, opened, fold, deepest, coarser
 *  (made shallower for its edges between modules), edge_limit}, nodes, flat_nodes,
 *  units: [{id, kind, path, name, ops, params, repeat}]}. */
export function fetchGraphLayout(subject, run, event, { signal, drawing = {} } = {}) {
  const s = typeof subject === "string" ? scenarioSubject({ name: subject }) : subject;
  return request(s.graphUrl(run, event, "json", drawing), { signal });
}

function tokenHeaders(token) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

/** Send a script to run: {source, name, device}; `token` when the server needs one. Resolves
 *  at once to the run's status ({id, state, place, limit_s, ...}); see fetchRunStatus. */
export function startRun(body, { token = "", signal } = {}) {
  return request("/api/runs?wait=false", { signal, method: "POST", body: JSON.stringify(body), headers: tokenHeaders(token) });
}

/** Where a run is: state (queued, running, done, stopped, failed), place in line, elapsed_s,
 *  limit_s. */
export function fetchRunStatus(id, { signal, wait = 0 } = {}) {
  // wait: seconds the server may hold the answer until the run ends (at most 10)
  return request(`/api/runs/${encodeURIComponent(id)}/status${wait ? `?wait=${wait}` : ""}`, { signal });
}

/** Stop a waiting or running run (yours, or any with the server's token). */
export function stopRun(id, { token = "" } = {}) {
  return request(`/api/runs/${encodeURIComponent(id)}`, { method: "DELETE", headers: tokenHeaders(token) });
}

export function fetchStoredRun(id, { signal } = {}) {
  return request(`/api/runs/${encodeURIComponent(id)}`, { signal });
}

/** Each module's gradient against depth, per backward pass (app/format/flow.py). */
export function fetchGradientFlow(subject, run, { signal } = {}) {
  return request(subject.flowUrl(run), { signal });
}

/** The devices a worker can use. The server asks a worker once (seconds: it starts torch) and
 *  answers 503 with Retry-After while the question is out: asked again then, a few times. */
export async function fetchDevices({ signal } = {}) {
  for (let tries = 1; ; tries += 1) {
    try {
      return await request("/api/devices", { signal });
    } catch (err) {
      if (!(err instanceof ApiError) || err.status !== 503 || tries >= 6) throw err;
      await new Promise((resolve) => setTimeout(resolve, 1000 * (err.retryAfter || 5)));
    }
  }
}

/** A JSON call whose every HTTP answer is the caller's to judge (a class, classroom.js acts on
 *  404, 401, 409...): {ok, status, data}, data being the JSON body (the server's `detail` and
 *  `code` on an error) or null. Throws ApiError(0) only when the server did not answer. */
export async function callJson(method, url, body, { token = "" } = {}) {
  const response = await send(url, { method, headers: tokenHeaders(token),
    body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try {
    data = await response.json();
  } catch { /* no body, or not JSON */ }
  return { ok: response.ok, status: response.status, data };
}
