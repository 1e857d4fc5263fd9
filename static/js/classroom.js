// A class session on every page (app/web/classes/). The teacher's pages send the view they
// show (its path and query: every view lives in the URL, permalink.js) whenever it changes;
// students' pages get the class's state pushed (server-sent events) and open the same view,
// unless the student chose to explore on their own. The browser's EventSource reconnects by
// itself and sends the last state's id, so a student who lost the network catches up.
//
// This tab's part in a class is kept in sessionStorage: {code, role, following}.
//
// The teacher's bar has a Members panel: who joined (by the name each chose, with its alias,
// grouped by network address, never showing one), a remove button each, and the switch a room
// behind one NAT needs ("This room shares one network address"). A browser the teacher removed
// is told so and stops.
//
// A student joining (/c/CODE) first chooses the name the teacher sees; the page follows once it
// is taken. Names are text strangers typed: they go in as text (never markup), inside <bdi> so
// a right-to-left name does not reorder the words around it. A student's bar offers "Send this
// run to the teacher" only on a run this browser started (the server says which). Choices are
// lettered; after the reveal a student's own pick is marked in words, and the revealed question
// folds away once the page moves on (a click opens it again). The server puts a question away
// when the teacher moves on to another page, variant or presenter step (classes/moving_on.py);
// the teacher's list of runs sent in folds to one line then. In presenter mode the bar is a band
// of fixed height (app.css), so neither ever pushes the graph off the projector.

import { callJson } from "./api.js";
import { fill, h } from "./dom.js";
import { questionsFor } from "./questions.js";
import { apply as applyView, subscribe, subscribeShown } from "./view_state.js";

const KEY = "autograd-lab-class";
const TOKEN_KEY = "autograd-lab-token";
const NAME_KEY = "autograd-lab-name"; // the last name this browser chose: offered next time
const LETTERS = "ABCDEFGHIJKL"; // a question has at most 12 choices (classes/state.py)
// the pages a class can be shown (classes/state.py checks the same)
const SHOWABLE = /^\/$|^\/scenarios\/[a-z][a-z0-9_]*$|^\/runs\/[A-Za-z0-9_-]+$/;

const bar = document.getElementById("class-bar");
const startButton = document.getElementById("class-start");
let mine = read();
let source = null; // the EventSource
let state = null; // the last state the server sent
let shown = null; // {doc, event} of the trace on this page (trace_page.js says)
let publishTimer = null;
let publishing = null; // the last view PUT, until it is answered
let waitingSend = null; // a view PUT queued behind the one in flight, not started yet
let roster = null; // the teacher's last GET .../members, while the Members panel is open
let rosterAt = 0; // when it came (performance.now()), for "joined N min ago"
let membersOpen = false;
let rosterTimer = null;
let leaving = false; // this page is being left: its stream's end means nothing
let naming = false; // a student who has not chosen a name yet: the bar asks for one
let nameDraft = null; // what they typed so far (the bar is redrawn as a whole)
let nameProblem = null; // why the server did not take the name
let ownRun = null; // {id, yours, sent}: is the run this page shows this student's own?
let revealOpen = null; // the id of the revealed question this page shows unfolded
let seenQuestion = null; // {id, revealed} as the last state had it: a reveal is a change
let followedView = null; // the last view followed (JSON): a new one folds the answer away
let runsOpen = false; // the teacher's "Runs sent in" list unfolded: new runs came in
let runsView = null; // the view (JSON) the teacher's list was unfolded on: moving on folds it
window.addEventListener("pagehide", () => { leaving = true; });

function storage() {
  try {
    return window.sessionStorage;
  } catch {
    return null;
  }
}

function read() {
  try {
    return JSON.parse(storage()?.getItem(KEY) || "null");
  } catch {
    return null;
  }
}

function save(value) {
  mine = value;
  const s = storage();
  if (!s) return;
  if (value) s.setItem(KEY, JSON.stringify(value));
  else s.removeItem(KEY);
}

// every call of a class goes through api.js; its answers are judged here (404: the class ended)
function call(method, path, body, token = "") {
  return callJson(method, path, body, { token });
}

function say(message, level = "error") {
  bar.hidden = false;
  fill(bar, h(`p.class-message.class-${level}`, {}, message));
}

// ---- the teacher ----------------------------------------------------------------------------

async function startClass() {
  let token = "";
  try { token = window.localStorage.getItem(TOKEN_KEY) || ""; } catch { /* no storage */ }
  let answer = await call("POST", "/api/classes", {}, token);
  if (answer.status === 401) {
    token = (window.prompt("Starting a class needs this server's token (the one it was started with):") || "").trim();
    if (!token) return;
    answer = await call("POST", "/api/classes", {}, token);
    if (answer.ok) {
      try { window.localStorage.setItem(TOKEN_KEY, token); } catch { /* no storage */ }
    }
  }
  if (!answer.ok) {
    say(`Could not start a class: ${(answer.data && answer.data.detail) || `HTTP ${answer.status}`}`);
    return;
  }
  save({ code: answer.data.code, role: "teacher", following: true });
  connect();
  publish();
}

function publish() {
  if (!mine || mine.role !== "teacher" || !SHOWABLE.test(location.pathname)) return;
  clearTimeout(publishTimer);
  publishTimer = setTimeout(() => { publishTimer = null; publishing = sendInTurn(); }, 40);
}

/** A view PUT sent once the one before it is answered, with the view shown by then: two in
 *  flight at once could be taken by a busy server in either order, and the class was left on
 *  the older step (a presenter's two quick steps; a proof's flake). One waits at most: it
 *  sends the view shown when it starts, so steps taken while the server is slow add none
 *  (each queued its own, all the same view). */
function sendInTurn() {
  if (waitingSend) return waitingSend;
  const before = publishing;
  if (!before) return sendView();
  const turn = before.catch(() => {}) // its failure was said; this one goes anyway
    .then(() => {
      if (waitingSend === turn) waitingSend = null; // it starts: a later step queues anew
      return sendView();
    });
  waitingSend = turn;
  return turn;
}

async function sendView() {
  if (!mine) return; // the class ended while this waited
  const answer = await call("PUT", `/api/classes/${mine.code}/view`,
    { path: location.pathname, query: location.search.replace(/^\?/, "") });
  if (answer.ok) return;
  if (answer.status === 404 || answer.status === 403 || answer.status === 409) leave("The class has ended.");
  else say(`The class was not shown this view: ${(answer.data && answer.data.detail) || `HTTP ${answer.status}`}`);
}

/** The view this page shows, known to the server: a question belongs to the place it is asked
 *  at (app/web/classes/moving_on.py), and a step taken just before asking was still on its way
 *  (a busy server took the question first, and kept it when the teacher stepped back). */
async function viewSent() {
  if (publishTimer) {
    clearTimeout(publishTimer);
    publishTimer = null;
    publishing = sendInTurn();
  }
  if (publishing) await publishing;
}

async function setShared(on) {
  const answer = await call("PATCH", `/api/classes/${mine.code}`, { shared_address: on });
  if (!answer.ok) say(`The switch was not changed: ${(answer.data && answer.data.detail) || answer.status}`);
  else if (membersOpen) loadRoster();
}

async function removeMember(alias, name) {
  const who = name ? `${name} (${alias})` : alias;
  if (!window.confirm(`Remove ${who} from the class? Their answer and runs leave the class, and that browser cannot join again.`)) return;
  const answer = await call("DELETE", `/api/classes/${mine.code}/members/${encodeURIComponent(alias)}`);
  if (!answer.ok && answer.status !== 404) say(`${alias} was not removed: ${(answer.data && answer.data.detail) || answer.status}`);
  else loadRoster();
}

/** The members, fetched when the panel opens and again (at most every half second) as the
 * teacher's state changes: joins, answers, runs sent. */
function loadRoster(soon = 0) {
  if (soon && rosterTimer) return; // one is on its way: it will see this change too
  clearTimeout(rosterTimer);
  rosterTimer = setTimeout(async () => {
    rosterTimer = null;
    if (!mine || mine.role !== "teacher" || !membersOpen) return;
    const answer = await call("GET", `/api/classes/${mine.code}/members`);
    if (!answer.ok) return; // the class ended: the stream says so
    roster = answer.data;
    rosterAt = performance.now();
    render();
  }, soon);
}

async function ask(question) {
  await viewSent();
  // the scenario's own question is asked by name: its answer is not in the page
  const body = question.scenario ? { scenario: question.scenario } :
    { prompt: question.prompt, choices: question.choices, answer: question.answer };
  const answer = await call("POST", `/api/classes/${mine.code}/question`, body);
  if (!answer.ok) say(`Could not ask: ${(answer.data && answer.data.detail) || answer.status}`);
}

// ---- students -------------------------------------------------------------------------------

function follow(view) {
  if (!view || !mine || mine.role !== "student" || !mine.following) return;
  followedView = JSON.stringify(view);
  applyView(view);
}

const needsName = (data) => data.role === "student" && !(data.me && data.me.name);

function askName(data) {
  state = data;
  naming = true;
  if (nameDraft === null) {
    try { nameDraft = window.localStorage.getItem(NAME_KEY) || ""; } catch { nameDraft = ""; }
  }
  render();
  const input = document.getElementById("class-name");
  if (input) input.focus();
}

async function chooseName(event) {
  event.preventDefault();
  const answer = await call("PUT", `/api/classes/${mine.code}/name`, { name: nameDraft || "" });
  if (!answer.ok) {
    if (answer.status === 403 || answer.status === 404) { recheck(); return; }
    nameProblem = (answer.data && answer.data.detail) || `HTTP ${answer.status}`;
    render();
    const input = document.getElementById("class-name");
    if (input) input.focus();
    return;
  }
  try { window.localStorage.setItem(NAME_KEY, answer.data.name); } catch { /* no storage */ }
  nameProblem = null;
  if (state) state.me = { ...(state.me || {}), name: answer.data.name };
  if (naming) {
    naming = false;
    connect(); // in the class now: follow the teacher
  }
  render();
}

async function rename() {
  const now = (state && state.me && state.me.name) || "";
  const wanted = window.prompt("The name your teacher sees:", now);
  if (wanted === null || wanted.trim() === now) return;
  nameDraft = wanted;
  nameProblem = null;
  await chooseName(new Event("submit"));
  if (nameProblem) say(`Your name was not changed: ${nameProblem}`);
}

function setFollowing(on) {
  save({ ...mine, following: on });
  connect(); // the server counts the students who follow
  if (on && state) follow(state.view);
}

async function answerQuestion(choice) {
  const answer = await call("POST", `/api/classes/${mine.code}/answer`, { question: state.question.id, choice });
  if (!answer.ok) {
    say(`Your answer was not taken: ${(answer.data && answer.data.detail) || answer.status}`);
    return;
  }
  // only the teacher's page is sent the tally: this page marks the answer itself
  if (state.question) state.question.mine = choice;
  render();
}

async function sendRun(runId) {
  const answer = await call("POST", `/api/classes/${mine.code}/runs`, { run: runId });
  if (answer.ok && ownRun && ownRun.id === runId) {
    ownRun.sent = true;
    render();
    return;
  }
  const button = document.getElementById("class-send-run");
  if (button) button.textContent = answer.ok ? "Sent to the teacher ✓" : `Not sent: ${(answer.data && answer.data.detail) || answer.status}`;
}

/** Did this browser start the run the page shows (only then may it send it), and is it on the
 * teacher's list already? Asked once per run; the bar is drawn again with the answer. */
async function checkRun(runId) {
  ownRun = { id: runId, yours: true, sent: false, by: null, checking: true };
  const answer = await call("GET", `/api/classes/${encodeURIComponent(mine.code)}/runs/${encodeURIComponent(runId)}`);
  if (!ownRun || ownRun.id !== runId || !answer.ok) return;
  ownRun = { id: runId, yours: Boolean(answer.data.yours), sent: Boolean(answer.data.sent), by: answer.data.by || null };
  runOwner();
  render();
}

/** A run page says "Your code" and offers "edit and run again" (templates/run.html): on a run
 * another member started (a classmate's the teacher shows, the teacher's own) the title names
 * whose it is, and the edit link goes. The name is text a stranger typed: text, in <bdi>. */
function runOwner() {
  const whose = document.getElementById("run-whose");
  if (!whose || !ownRun || ownRun.yours) return;
  const kind = whose.dataset.kind || "code";
  if (ownRun.by === "the teacher") fill(whose, `The teacher's ${kind}`);
  else if (ownRun.by) fill(whose, h("bdi.class-name", {}, ownRun.by), `'s ${kind}`);
  else fill(whose, `Someone else's ${kind}`);
  const edit = document.getElementById("run-edit");
  if (edit) edit.hidden = true;
  const name = whose.parentElement.querySelector("code");
  document.title = `${whose.textContent}: ${name ? name.textContent : ""} · autograd-lab`;
}

// ---- both -----------------------------------------------------------------------------------

function connect() {
  if (source) source.close();
  if (!mine) return;
  const following = mine.role === "student" && mine.following ? 1 : 0;
  source = new EventSource(`/api/classes/${encodeURIComponent(mine.code)}/events?following=${following}`);
  source.onmessage = (e) => receive(JSON.parse(e.data));
  source.addEventListener("ended", () => leave("The class has ended."));
  source.addEventListener("removed", () => leave("The teacher removed this browser from the class."));
  // a named teacher's token revoked (app/web/deps.py revoked_teacher): the server says why
  source.addEventListener("revoked", (e) => leave(JSON.parse(e.data).detail));
  source.onerror = () => {
    bar.classList.add("class-offline"); // the browser reconnects by itself...
    if (source.readyState === EventSource.CLOSED && !leaving) setTimeout(recheck, 1000); // ...unless refused
  };
  source.onopen = () => bar.classList.remove("class-offline");
}

/** The stream was refused (not just cut): is the class gone, or was the server away? */
async function recheck() {
  if (!mine || leaving) return;
  let answer;
  try {
    answer = await call("GET", `/api/classes/${encodeURIComponent(mine.code)}`);
  } catch {
    setTimeout(recheck, 2000); // no network yet
    return;
  }
  if (answer.ok && needsName(answer.data)) askName(answer.data);
  else if (answer.status === 404) leave("The class is not on this server any more.");
  else if (answer.status === 403) leave((answer.data && answer.data.detail) || "The teacher removed this browser from the class.");
  else if (answer.status === 429) {
    // this address is full (the teacher may switch on "shares one network address"), or too
    // many codes came from it: say so, and try again now and then
    const full = answer.data && answer.data.code === "address_full";
    say(full ? "Not in the class yet: as many browsers as one network address may stand for " +
      "have joined from this one. If the whole room shares one network address, ask the " +
      "teacher to switch on “This room shares one network address” (under Members in their " +
      "class bar): this page joins by itself once it is on." :
      `Not in the class yet: ${(answer.data && answer.data.detail) || "try again later"}`, "info");
    setTimeout(recheck, 10_000);
  } else connect();
}

function leave(message) {
  if (source) source.close();
  source = null;
  state = null;
  roster = null;
  membersOpen = false;
  naming = false;
  save(null);
  document.body.classList.remove("class-predicting");
  say(message, "info");
  if (startButton) startButton.hidden = false;
}

function receive(next) {
  const q = next.question;
  // the class moved on to another view: a revealed answer folds away (before it is drawn)
  if (mine.role === "student" && mine.following && next.view && followedView !== null &&
    JSON.stringify(next.view) !== followedView) revealOpen = null;
  // the reveal, seen happen on this page: the answer is shown unfolded here, folded elsewhere
  if (q && q.revealed && seenQuestion && seenQuestion.id === q.id && !seenQuestion.revealed) revealOpen = q.id;
  seenQuestion = q ? { id: q.id, revealed: q.revealed } : null;
  if (mine.role === "teacher") foldRuns(next);
  state = next;
  if (mine && next.role !== mine.role) save({ ...mine, role: next.role });
  bar.classList.remove("class-offline");
  render();
  if (mine.role === "student") follow(next.view);
  else if (membersOpen) loadRoster(500);
}

function render() {
  if (!mine || !state) return;
  bar.hidden = false;
  if (startButton) startButton.hidden = true;
  if (naming) {
    fill(bar, nameForm());
    return;
  }
  const link = `${location.origin}/c/${state.code}`;
  const q = state.question;
  // students predict before they see: the gradient views stay hidden until the reveal
  document.body.classList.toggle("class-predicting", Boolean(mine.role === "student" && q && !q.revealed));
  const head = mine.role === "teacher" ? [
    h("strong", {}, `Class ${state.code}`),
    h("span", {}, " · students open "), h("a.class-link", { href: link }, link),
    h("span.class-followers#class-followers", {}, ` · ${state.followers} following`),
    askButtons(),
    sendButton(), // (never a button for the teacher: it asks whose a run page's run is)
    h("button.link#class-end", { type: "button", onclick: endClass }, "End class"),
  ] : [
    h("strong", {}, `Class ${state.code}`),
    mine.following ?
      [h("span.class-following", {}, " · following the teacher "),
        h("button#class-unfollow", { type: "button", onclick: () => setFollowing(false) }, "Stop following")] :
      [h("span.class-following", {}, " · exploring on your own "),
        h("button#class-follow", { type: "button", onclick: () => setFollowing(true) }, "Follow again")],
    state.me && state.me.name ? h("span.class-me", {}, " · as ", h("bdi.class-name#class-my-name", {}, state.me.name), " ",
      h("button.link#class-rename", { type: "button", onclick: rename }, "change")) :
      h("button.link#class-rename", { type: "button", onclick: rename }, "choose your name"),
    sendButton(),
  ];
  fill(bar, h("div.class-head", {}, head), q ? questionView(q) : null,
    mine.role === "teacher" && state.submissions.length ? submissionsView(state.submissions) : null,
    mine.role === "teacher" ? membersView() : null);
}

function askButtons() {
  // the scenario's own question (CLASS_QUESTION in its source), then those made from the run
  const questions = shown ? [...(shown.scenario ? [{ key: "scenario", ...shown.scenario }] : []),
    ...questionsFor(shown.doc, shown.event)] : [];
  if (!questions.length) return null;
  const labels = { scenario: "the scenario's question", uses: "uses?", grads: "how many get .grad?", first: "first node?" };
  return h("span.class-ask", {}, " · ask the class: ",
    questions.map((question) => h("button", { type: "button", dataset: { ask: question.key },
      onclick: () => ask(question) }, labels[question.key])));
}

/** A student's way into the class: the name the teacher will see, before following. */
function nameForm() {
  return h("form.class-name-form#class-name-form", { onsubmit: chooseName },
    h("strong", {}, `Class ${state.code}`),
    h("label", { for: "class-name" }, " · your name, as the teacher will see it: "),
    h("input#class-name", { type: "text", maxlength: 40, autocomplete: "nickname", required: true,
      value: nameDraft || "", "aria-describedby": "class-name-help", oninput: (e) => { nameDraft = e.target.value; } }),
    " ", h("button#class-join-button", { type: "submit" }, "Join the class"),
    nameProblem ? h("p.class-message.class-error#class-name-problem", { role: "alert" }, nameProblem) : null,
    h("p.hint#class-name-help", {}, "Up to 40 characters. The teacher sees it in the class's list of members ",
      "(whether you answered a question, not what) and beside the runs you send. You can change it later."));
}

function sendButton() {
  const match = location.pathname.match(/^\/runs\/([A-Za-z0-9_-]+)$/);
  if (!match) return null;
  // only on this student's own runs: not on one the teacher (or a classmate) showed
  if (!ownRun || ownRun.id !== match[1]) {
    checkRun(match[1]);
    return null;
  }
  if (!ownRun.yours || ownRun.checking || mine.role !== "student") return null;
  return h("button#class-send-run", { type: "button", disabled: ownRun.sent, onclick: () => sendRun(match[1]) },
    ownRun.sent ? "Sent to the teacher ✓" : "Send this run to the teacher");
}

const letter = (i) => LETTERS[i] || String(i + 1);
const choiceLabel = (q, i) => [h("span.choice-letter", { "aria-hidden": "true" }, letter(i)), h("span.choice-text", {}, q.choices[i])];
const said = (q, i) => `${letter(i)} (${q.choices[i]})`;

function questionView(q) {
  const teacher = mine.role === "teacher";
  if (!teacher && q.revealed) return revealedView(q);
  const total = q.tally ? q.tally.reduce((a, b) => a + b, 0) : 0;
  const choices = q.choices.map((text, i) => {
    // marked only once revealed: the teacher's screen is often the projector
    const right = q.answer === i && q.revealed;
    if (teacher) {
      const count = q.tally[i];
      const bar = h("span.tally-bar");
      bar.style.width = `${total ? (100 * count) / total : 0}%`; // CSSOM: no inline style attribute (CSP)
      return h(`li.tally-row${right ? ".is-answer" : ""}`, { dataset: { choice: i } },
        h("span.choice-letter", { "aria-hidden": "true" }, letter(i)),
        h("span.tally-choice", {}, text, right ? h("span.choice-mark", {}, " ✔ the answer") : null),
        h("span.tally-track", {}, bar), h("span.tally-count", {}, String(count)));
    }
    const picked = q.mine === i;
    return h(`li${picked ? ".is-mine" : ""}`, {},
      h("button", { type: "button", "aria-pressed": picked ? "true" : "false", "aria-label": `${letter(i)}: ${text}`,
        dataset: { choice: i }, onclick: () => answerQuestion(i) }, choiceLabel(q, i),
      picked ? h("span.choice-mark", {}, "your answer") : null));
  });
  return h("section.class-question", { "aria-label": "Question" },
    h("p.class-prompt", {}, q.prompt),
    h("ul.class-choices", {}, choices),
    teacher ? h("p", {}, `${total} answered `,
      q.revealed ? h("button#class-clear", { type: "button", onclick: () => call("DELETE", `/api/classes/${mine.code}/question`) }, "Put it away") :
        h("button#class-reveal", { type: "button", onclick: () => call("POST", `/api/classes/${mine.code}/reveal`) }, "Reveal")) :
      h("p.hint", {}, q.mine === null || q.mine === undefined ? "Pick your answer: the gradient views stay hidden until the teacher reveals." :
        `Your answer, ${said(q, q.mine)}, is in. Wait for the reveal (you may still change it).`));
}

/** A student's revealed question: the answer and their own pick said in words, folded away
 * once the page has moved on from where the reveal was seen (a click opens it). */
function revealedView(q) {
  const answered = q.mine !== null && q.mine !== undefined;
  const right = answered && q.mine === q.answer;
  const verdict = !answered ? `the answer: ${said(q, q.answer)} (you did not answer)` :
    right ? `you picked ${said(q, q.mine)}: right ✔` : `you picked ${said(q, q.mine)}; the answer: ${said(q, q.answer)}`;
  const choices = q.choices.map((text, i) => {
    const classes = `${i === q.answer ? ".is-answer" : ""}${i === q.mine ? ".is-mine" : ""}`;
    return h(`li${classes}`, { dataset: { choice: i } }, choiceLabel(q, i),
      i === q.answer ? h("span.choice-mark.choice-right", {}, "✔ the answer") : null,
      i === q.mine ? h("span.choice-mark.choice-yours", {}, right ? "· your answer" : "your answer ✗") : null);
  });
  const toggle = (e) => { revealOpen = e.target.open ? q.id : null; };
  return h(`details.class-question.is-revealed${right ? ".is-right" : answered ? ".is-wrong" : ""}`,
    { open: revealOpen === q.id, ontoggle: toggle, "aria-label": "Question" },
    h("summary", {}, h("span.class-prompt", {}, q.prompt), " — ", h("strong.class-verdict", {}, verdict)),
    h("ul.class-choices.is-revealed", {}, choices),
    h("p.hint", {}, "The gradient views are back."));
}

/** The teacher's list of runs sent in unfolds when a new one comes in, and folds to its one
 * line once the teacher moves on to another view (or opens one of them): the class bar is a
 * band that never grows past what the projector can spare. How many this tab has seen is kept
 * with its part in the class, so a new page does not unfold the list for runs seen before. */
function foldRuns(next) {
  const view = JSON.stringify(next.view);
  const count = (next.submissions || []).length;
  if (count > (mine.runsSeen || 0)) {
    runsOpen = true;
    runsView = view;
    save({ ...mine, runsSeen: count });
  } else if (runsView !== view) runsOpen = false;
}

function submissionsView(list) {
  const toggle = (e) => {
    if (e.target.open === runsOpen) return; // drawn again as it was
    runsOpen = e.target.open;
    runsView = JSON.stringify(state.view);
  };
  return h("details.class-runs", { open: runsOpen, ontoggle: toggle }, h("summary", {}, `Runs sent in (${list.length})`),
    h("ul", {}, list.map((s) => h("li", { dataset: { run: s.run } }, h("a", { href: s.link }, `${s.name || s.run}`), " by ",
      h("bdi.class-name", {}, s.by)))));
}

function membersView() {
  const turned = state.turned_away || 0;
  const summary = h("summary", {}, `Members (${state.members})`,
    turned ? h("span.class-turned", {}, ` · ${turned} turned away: their network address is full`) : null);
  const toggle = (e) => {
    if (e.target.open === membersOpen) return; // re-rendered as it was: nothing to do
    membersOpen = e.target.open;
    if (membersOpen) loadRoster();
  };
  return h("details.class-members", { open: membersOpen, ontoggle: toggle }, summary,
    h("label.class-shared", { title: "A classroom behind one router (NAT): every student's device reaches the server from one address. On, they may all join, and each has their own vote, pages and runs." },
      h("input#class-shared", { type: "checkbox", checked: Boolean(state.shared_address),
        onchange: (e) => setShared(e.target.checked) }),
      " This room shares one network address"),
    roster ? rosterView(roster) : h("p.hint", {}, "Loading…"));
}

function ago(seconds) {
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

function rosterView(r) {
  if (!r.members.length) {
    return h("p.hint", {}, r.removed ? `No members now (${r.removed} removed).` : "Nobody has joined yet: students open the link above.");
  }
  const since = (performance.now() - rosterAt) / 1000;
  return h("ul.class-roster", {}, r.addresses.map((group) => h("li", {},
    h("span.class-group", {}, `${group.name}${group.yours ? " (your address too)" : ""} · ${group.members} member${group.members === 1 ? "" : "s"}`),
    h("ul", {}, r.members.filter((m) => m.address === group.name).map((m) => h("li.class-member", { dataset: { alias: m.alias } },
      m.name ? h("bdi.class-name", {}, m.name) : h("span.hint", {}, "(no name yet)"), " ",
      h("span.class-alias", {}, m.alias),
      h("span.hint", {}, [` joined ${ago(m.joined_s + since)}`,
        m.answered === null ? "" : m.answered ? " · answered" : " · not answered",
        ` · ${m.streams} page${m.streams === 1 ? "" : "s"}`,
        m.runs_sent ? ` · ${m.runs_sent} run${m.runs_sent === 1 ? "" : "s"} sent` : ""].join("")),
      " ", h("button.link.class-remove", { type: "button", onclick: () => removeMember(m.alias, m.name) }, "Remove")))))));
}

async function endClass() {
  await call("DELETE", `/api/classes/${mine.code}`);
  leave("The class has ended.");
}

// ---- wiring ---------------------------------------------------------------------------------

if (startButton) startButton.addEventListener("click", startClass);
// the page changed its address (permalink.js): the teacher's class sees it
subscribe(publish);
// a trace page says which run and event it shows: the teacher may ask about it
subscribeShown((detail) => {
  shown = detail;
  render();
});
// the join page (/c/CODE) says which class this tab joins
const joining = document.getElementById("class-join");
if (joining) save({ code: joining.dataset.code, role: mine && mine.code === joining.dataset.code ? mine.role : "student", following: true });
// a student who went to write their own code is exploring on their own: following would take
// them away from it (the draft is kept, but not their train of thought)
if (mine && mine.role === "student" && mine.following && !joining && !SHOWABLE.test(location.pathname)) {
  save({ ...mine, following: false });
}
if (mine) {
  // a student joining chooses a name first (recheck asks the class, then the bar asks them)
  if (joining && mine.role === "student") recheck();
  else connect();
  // a page opened from within this app is shown to the class; one another site sent this tab
  // to (or a typed address) is not, until the teacher changes something on it
  let fromHere = false;
  try { fromHere = Boolean(document.referrer) && new URL(document.referrer).origin === location.origin; } catch { /* none */ }
  if (fromHere) publish();
}
