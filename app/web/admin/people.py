"""The recent runs grouped by person, for the admin page: a person is a run's client key (a
browser's signed cookie, or an address standing in for a program: client_keys.py), the same
identity the run book's and the store's shares count by.

A cookie is a secret and never shown: a person is named by the alias a class would give it
(`student-` and six hex digits of its hash), or by the alias and the name it chose in an open
class it is a member of. Names come from strangers (a script's file name, a member's chosen
name): each is cut to MAX_TEXT characters here and escaped by the template (Jinja's
autoescape). Bounded: at most RUNS_READ runs are read, PEOPLE_SHOWN people shown, the newest
first, RUNS_PER_PERSON runs each."""

from __future__ import annotations

import hashlib

from app.web.classes.state import ClassState
from app.web.client_keys import is_browser

__all__ = ["MAX_TEXT", "PEOPLE_SHOWN", "RUNS_PER_PERSON", "RUNS_READ", "by_person", "short"]

RUNS_READ = 500
PEOPLE_SHOWN = 50
RUNS_PER_PERSON = 10
MAX_TEXT = 80


def short(text: object, limit: int = MAX_TEXT) -> str:
    """`text` as a line of at most `limit` characters (an ellipsis where it was cut)."""
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def alias_of(client: str, kind: str = "student") -> str:
    """The alias a class gives this browser (classes/state.py), shown wherever it is listed;
    a class's teacher's with `kind` "teacher" (the same digits)."""
    return f"{kind}-" + hashlib.sha256(client.encode()).hexdigest()[:6]


def by_person(runs: list[dict], classes: list[ClassState], addresses: bool) -> list[dict]:
    """`runs` (RunQueue.latest, newest first) grouped by whose they are: [{who, alias, name,
    class, address, runs: [{id, name, state, age_s, link, live}], count}], the person with the
    newest run first. `addresses`: whether the reader may see network addresses (the server's
    token's holder; a named teacher is shown none)."""
    members = {client: (state.code, m) for state in classes
               for client, m in state.members.items()}
    teachers = {state.teacher: state.code for state in classes}
    people: dict[str, dict] = {}
    for run in runs:
        client = run["client"]
        person = people.get(client)
        if person is None:
            if len(people) >= PEOPLE_SHOWN:
                continue
            person = people[client] = _person(client, run["address"], members, teachers,
                                              addresses)
        person["count"] += 1
        if len(person["runs"]) < RUNS_PER_PERSON:
            state = str(run["state"])
            person["runs"].append({"id": short(run["id"], 64), "name": short(run["name"]),
                                   "state": short(state, 16), "age_s": run["age_s"],
                                   "link": f"/runs/{run['id']}",
                                   "live": state in ("queued", "running")})
    return list(people.values())


def _person(client: str, address: str, members: dict, teachers: dict,
            addresses: bool) -> dict:
    code, member = members.get(client, (None, None))
    if member is not None:
        alias, name = member.alias, member.name
    elif client in teachers:
        code, alias, name = teachers[client], alias_of(client, "teacher"), "the teacher"
    elif is_browser(client):
        alias, name = alias_of(client), None
    else:  # an address standing in for a program (no cookie)
        alias, name = "a program", None
    return {"alias": alias, "name": short(name) if name else None, "class": code,
            "address": short(address, 64) if addresses and address else None,
            "runs": [], "count": 0}
