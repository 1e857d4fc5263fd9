// The admin page (templates/admin.html, app/web/routers/admin.py). A browser sends no header
// when it opens a page, so a server with a token answers /admin with a field for it: this
// asks for /admin again with `Authorization: Bearer` and puts the answer's #admin-root in
// place of this one. The answer is the server's HTML, every stranger's string in it escaped
// there (Jinja); DOMParser runs no script. Each action (a form.admin-action) is a POST of a
// JSON body with the token, then the page is read again.

import { callJson } from "./api.js";

const TOKEN_KEY = "autograd-lab-token"; // where the class bar keeps it (classroom.js)

function storedToken() {
  try { return window.localStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

function keepToken(token) {
  try { window.localStorage.setItem(TOKEN_KEY, token); } catch { /* no storage */ }
}

function say(text) {
  const said = document.getElementById("admin-said");
  if (said) said.textContent = text;
}

/** /admin read again with the token; its #admin-root in place of this one. True if it let us in. */
async function reload(token, said = "") {
  let response;
  try {
    response = await fetch("/admin", { headers: token ? { Authorization: `Bearer ${token}` } : {},
                                       cache: "no-store" });
  } catch {
    say("The server did not answer: try again in a moment.");
    return false;
  }
  const page = new DOMParser().parseFromString(await response.text(), "text/html");
  const fresh = page.getElementById("admin-root");
  const root = document.getElementById("admin-root");
  if (!fresh || !root) return false;
  const opened = fresh.dataset.locked === "false";
  if (opened || root.dataset.locked === "false") {
    root.replaceWith(document.importNode(fresh, true));
    bind(token);
  }
  say(said);
  return opened;
}

async function act(form, token) {
  const button = form.querySelector("button");
  if (button) button.disabled = true;
  say("Working…");
  const answer = await callJson("POST", form.getAttribute("action"), {}, { token });
  const state = answer.data?.state;
  if (answer.ok && (state === "queued" || state === "running")) {
    // a stop waits 10 s on the server; a run whose worker was still starting ends once it
    // has one: read the page again until it has ended (or a minute has passed)
    await reload(token, "Stop asked: the run is still ending.");
    for (let tries = 0; tries < 30; tries += 1) {
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const now = await callJson("GET", `/api/runs/${encodeURIComponent(answer.data.id)}/status`);
      if (!now.ok || !["queued", "running"].includes(now.data?.state)) break;
    }
    await reload(token, form.dataset.said || "Done.");
  } else if (answer.ok) {
    await reload(token, form.dataset.said || "Done.");
  } else {
    if (button) button.disabled = false;
    say(answer.data?.detail || `The server refused (${answer.status}).`);
  }
}

function bind(token) {
  for (const form of document.querySelectorAll("form.admin-action")) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      act(form, token);
    });
  }
  document.getElementById("admin-refresh")?.addEventListener("click", () => reload(token, "Refreshed."));
  const tokenForm = document.getElementById("admin-token-form");
  tokenForm?.addEventListener("submit", async (event) => {
    event.preventDefault();
    const given = tokenForm.elements.token.value.trim();
    if (!given) return;
    if (await reload(given)) {
      keepToken(given);
    } else {
      say("That is not this server's token, nor a named teacher's: check it and try again.");
    }
  });
}

const root = document.getElementById("admin-root");
if (root) {
  const token = storedToken();
  bind(token);
  // a token kept from before (the class bar's, or this page's): tried once, at once
  if (root.dataset.locked === "true" && token) {
    reload(token).then((opened) => { if (!opened) say("The token this browser kept is not accepted here: give the server's token."); });
  }
}
