// The "Your own code" page: paste or upload a script, choose the device, run it, go to its page.
// Nothing the user typed is lost: the textarea is never cleared, and a draft survives a reload
// or a trip to the run's page and back (sessionStorage). A script that fails before recording
// anything is reported here, next to the text to fix, rather than on an empty run page.

import { ApiError, fetchDevices, fetchRunStatus, fetchStoredRun, startRun, stopRun } from "./api.js";
import { fill, h } from "./dom.js";
import { Progress } from "./progress.js";
import { lineLabel, setScript } from "./lines.js";
import { errorHeadline, explanationParts, setStatus } from "./status.js";

const $ = (id) => document.getElementById(id);
const page = JSON.parse($("page-data").textContent);
const policy = page.policy;
const TOKEN_KEY = "autograd-lab-token";
const DRAFT_KEY = "autograd-lab-draft";

const form = $("run-form");
const source = $("source");
const nameInput = $("name");
const device = $("device");
const token = $("token"); // only when the server needs one
const runButton = $("run");
const status = $("run-status");
const progress = new Progress($("progress"), $("progress-text"));
const stopButton = $("stop-run");
let current = null; // the id of the run this page waits for

const EXAMPLE = `import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 3), torch.randn(8, 1)

for epoch in range(2):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
`;

function storage(kind) {
  try {
    return kind === "local" ? window.localStorage : window.sessionStorage;
  } catch {
    return null; // storage switched off: the page still works, it just forgets
  }
}

function saveDraft() {
  const s = storage("session");
  if (s) s.setItem(DRAFT_KEY, JSON.stringify({ source: source.value, name: nameInput.value, device: device.value }));
}

function restoreDraft() {
  const s = storage("session");
  const draft = s && s.getItem(DRAFT_KEY);
  if (!draft || source.value) return;
  try {
    const d = JSON.parse(draft);
    source.value = d.source || "";
    nameInput.value = d.name || "script.py";
    if (d.device) device.dataset.wanted = d.device;
  } catch { /* an old or broken draft: ignore it */ }
}

/** Put the caret on a line of the textarea and scroll it into view (for an error's line). */
function goToLine(line, { scroll = true } = {}) {
  const lines = source.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  const end = start + (lines[line - 1] || "").length;
  source.focus({ preventScroll: !scroll });
  source.setSelectionRange(start, end);
  const lineHeight = parseFloat(getComputedStyle(source).lineHeight) || 20;
  source.scrollTop = Math.max(0, (line - 4) * lineHeight);
}

/** The run stopped before it recorded anything: say why here, with the line to fix. */
function showScriptError(doc) {
  const err = doc.error;
  const ex = err.explanation && err.explanation.code !== "unrecognised" ? err.explanation : null;
  // a notebook's lines are its cells' ("cell 3, line 2"), and the box holds its JSON, so the
  // line's text comes from the script that ran and the caret stays where it is
  const notebook = Boolean(doc.script.notebook);
  setScript(doc.script);
  const onLine = notebook ? () => {} : goToLine;
  const text = err.line ? ((notebook ? doc.script.source : source.value).split("\n")[err.line - 1] || "") : "";
  setStatus(status, [
    errorHeadline(err, onLine),
    // the line itself, unless the message already quotes it (a SyntaxError's does)
    text.trim() && !err.message.includes(text.trim()) ?
      h("pre.run-error-source", {}, `${notebook ? lineLabel(err.line) : err.line} | ${text}`) : "",
    ex ? explanationParts(ex, onLine) : "",
    h("br"), err.type === "Stopped" ? "Change it in the box if you like and run again, or " :
      "Fix it in the box and run again, or ",
    h("a", { href: doc.run.link }, "open the run anyway"), ".",
  ], "error");
  const culprit = (ex && ex.line) || err.line;
  // the line is selected in the box, but the page stays on the explanation above it (focusing
  // the box used to scroll the explanation out of sight); its line links still scroll there
  if (culprit && !notebook) goToLine(culprit, { scroll: false });
  const top = status.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight - 80) status.scrollIntoView({ block: "start" });
}

/** The API's sentences start in lower case (they are also read by programs). */
const sentence = (text) => text.charAt(0).toUpperCase() + text.slice(1) + (/[.)]$/.test(text) ? "" : ".");

function explainFailure(err) {
  if (!(err instanceof ApiError)) return `Something went wrong in the page: ${err.message}`;
  if (err.status === 401 && !token) {
    // no token field: this page was opened as a class's member, and the class has ended (or
    // the teacher removed this browser) since; reloading shows the field if it is needed now
    return `${sentence(err.message)} (Reload this page: it asks for the server's token if you need it now.)`;
  }
  if (err.status === 401) {
    const s = storage("local");
    if (s) s.removeItem(TOKEN_KEY); // it was wrong: ask again rather than resend it
    if (token) {
      token.value = "";
      token.focus();
    }
    return "The server did not accept that token. Type the token the server was started with " +
      "(its --token) in “Server token” and run again.";
  }
  if (err.status === 503 && err.retryAfter) return `${sentence(err.message)} (The server suggests waiting ${err.retryAfter} s.)`;
  return sentence(err.message);
}

async function run(event) {
  event.preventDefault();
  if (!source.value.trim()) {
    setStatus(status, "The script is empty: paste a script into the box, or upload a .py file.", "error");
    source.focus();
    return;
  }
  if (token && !token.value.trim()) {
    setStatus(status, "This server runs code only with its token: type it in “Server token”.", "error");
    token.focus();
    return;
  }
  saveDraft();
  setStatus(status, null);
  runButton.disabled = true;
  form.setAttribute("aria-busy", "true");
  const what = `${nameInput.value || "script.py"} on ${device.value}`;
  progress.show(`Sending ${what}…`);
  try {
    const started = await startRun({ source: source.value, name: nameInput.value, device: device.value },
      { token: token ? token.value.trim() : "" });
    if (token) {
      const s = storage("local");
      if (s) s.setItem(TOKEN_KEY, token.value.trim()); // it worked: do not ask again
    }
    current = started.id;
    stopButton.hidden = false;
    const final = await waitForRun(started, what);
    if (final.state === "failed") throw new ApiError(503, final.detail || "the run could not start");
    // the status says whether there is a graph to show: a big model's Trace is fetched once,
    // by the run's page, not here too (unless the script failed before recording anything)
    if (typeof final.events === "number" && !(final.error_type && final.events === 0)) {
      location.assign(final.link);
      return;
    }
    const doc = await fetchStoredRun(final.id);
    if (doc.error && !doc.events.length) {
      showScriptError(doc);
      return;
    }
    location.assign(doc.run.link);
  } catch (err) {
    setStatus(status, explainFailure(err), "error");
  } finally {
    current = null;
    stopButton.hidden = true;
    progress.stop();
    runButton.disabled = Boolean(policy.refused);
    form.removeAttribute("aria-busy");
  }
}

/** Poll the run's status until it ends, saying where it is: its place in line, or how long it
 *  has run against its wall-clock limit. */
async function waitForRun(run, what) {
  for (;;) {
    if (run.state === "queued") {
      const place = run.place ? `number ${run.place} in line` : "waiting for its turn";
      // a line nobody takes from (no upload host running) says so, rather than a place alone
      progress.show(`${what}: ${place} (${run.running} running, ${run.waiting} waiting) — waited ${run.waited_s} s` +
        (run.detail ? `. ${run.detail}` : ""));
    } else if (run.state === "running") {
      progress.show(`Running ${what}: ${run.elapsed_s} s of at most ${run.limit_s} s`);
    } else {
      return run;
    }
    // the server holds the answer until the run ends or a second has passed: the page hears
    // of the end at once; a server that answers at once anyway is not asked in a tight loop
    const asked = performance.now();
    run = await fetchRunStatus(run.id, { wait: 1 });
    const quick = 400 - (performance.now() - asked);
    if (quick > 0 && (run.state === "queued" || run.state === "running")) {
      await new Promise((resolve) => setTimeout(resolve, quick));
    }
  }
}

async function stop() {
  if (!current) return;
  stopButton.disabled = true;
  try {
    await stopRun(current, { token: token ? token.value.trim() : "" });
  } catch (err) {
    setStatus(status, explainFailure(err), "error");
  } finally {
    stopButton.disabled = false;
  }
}

async function readFile() {
  const file = $("file").files[0];
  if (!file) return;
  const notebook = file.name.toLowerCase().endsWith(".ipynb");
  // a notebook's outputs do not count against the script's limit: the server holds its code to
  // that, and the file as saved to a bound of its own
  const limit = notebook ? policy.max_notebook_bytes : policy.max_upload_bytes;
  if (file.size > limit) {
    setStatus(status, `${file.name} is ${Math.ceil(file.size / 1024)} KiB; the limit is ` +
      `${limit / 1024} KiB. ` + (notebook ? "Clear its outputs (Jupyter: Edit → " +
      "Clear Outputs of All Cells; they are not used), save it and upload it again." : "Upload a smaller script."), "error");
    return;
  }
  source.value = await file.text();
  // a notebook is sent as it is (its JSON): the server runs its code cells (app/format/notebook.py)
  nameInput.value = file.name.endsWith(".py") || notebook ? file.name : "script.py";
  setStatus(status, notebook ? `Loaded the notebook ${file.name}: it runs as it is, its code cells in ` +
    "order as one script; lines only IPython understands (%…, !…) are skipped and named, and its " +
    "outputs are not used. Run it." : `Loaded ${file.name}: check it below, then run it.`, "info");
  saveDraft();
}

async function loadDevices() {
  try {
    const { devices } = await fetchDevices();
    const wanted = device.dataset.wanted || device.value;
    fill(device, ...devices.map((d) => h("option", { value: d }, d)));
    device.value = devices.includes(wanted) ? wanted : "cpu";
  } catch (err) {
    device.title = `could not list devices: ${err.message}`;
  }
}

/** /own-code?from=ID: start from a stored run's script ("edit and run again"). */
async function loadFrom(id) {
  try {
    const doc = await fetchStoredRun(id);
    source.value = doc.script.source;
    nameInput.value = doc.script.name;
    device.dataset.wanted = doc.device;
    device.value = doc.device;
  } catch (err) {
    setStatus(status, `Could not load that run's script: ${err.message}`, "error");
  }
}

form.addEventListener("submit", run);
stopButton.addEventListener("click", stop);
source.addEventListener("input", saveDraft);
$("file").addEventListener("change", readFile);
$("example").addEventListener("click", () => {
  if (source.value.trim() && !confirm("Replace the script in the box with the example?")) return;
  source.value = EXAMPLE;
  nameInput.value = "example.py";
  saveDraft();
  source.focus();
});
if (token) {
  const s = storage("local");
  token.value = (s && s.getItem(TOKEN_KEY)) || "";
}

const from = new URLSearchParams(location.search).get("from");
if (from) await loadFrom(from);
else restoreDraft();
loadDevices();
