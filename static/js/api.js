// The page's only way to the server: the JSON API under /api. Every error becomes an ApiError
// whose message is the server's `detail`, written for a person to act on.

/** The Trace format this page understands (app/trace/trace.schema.json). */
export const TRACE_FORMAT = "autograd-lab/trace@1";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
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

export function traceUrl(name, run) {
  return `/api/scenarios/${encodeURIComponent(name)}/trace?${runQuery(run)}`;
}

export function graphUrl(name, run, event, fmt = "svg") {
  return `/api/scenarios/${encodeURIComponent(name)}/graph.${fmt}?${runQuery(run, { event })}`;
}

async function request(url, { signal, as = "json" } = {}) {
  let response;
  try {
    response = await fetch(url, { signal, headers: { Accept: as === "json" ? "application/json" : "*/*" } });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "The server did not answer. Is `autograd-lab serve` still running?");
  }
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (typeof body.detail === "string") detail = body.detail;
    } catch { /* not JSON: keep the status line */ }
    throw new ApiError(response.status, detail);
  }
  return as === "json" ? response.json() : response.text();
}

/** The Trace of one run; refuses a document whose format this page does not know. */
export async function fetchTrace(name, run, { signal } = {}) {
  const doc = await request(traceUrl(name, run), { signal });
  if (!doc || doc.format !== TRACE_FORMAT) throw new FormatError(doc && doc.format);
  return doc;
}

export function fetchGraphSvg(name, run, event, { signal } = {}) {
  return request(graphUrl(name, run, event, "svg"), { signal, as: "text" });
}

export function fetchDevices({ signal } = {}) {
  return request("/api/devices", { signal });
}
