"""A class as every web process must agree on it: `ClassState`, a dataclass (the view the
teacher shows, the question and its answers, the members, the runs sent in, the version), and
the rules that change it. Nothing here knows streams, threads or where the state is kept: the
in-process classroom holds it in memory, the shared one in a PostgreSQL row (`to_dict` /
`from_dict`, made by `dataclasses.asdict`), and each process's streams live beside it in
`ClassSession` (session.py).

A change every reader sees bumps `version`; a change only the teacher sees (a member joined,
the tally, a name) bumps `audience`. Both only grow, and a session wakes its streams by which
of them moved.

A browser that opens a class becomes a member (`Member`): its address, the alias the teacher
sees, when it joined. One address may have at most `people` members (cookies are free: one
machine could otherwise be a whole class) unless the teacher says the room shares one network
address (`shared_at`: a classroom behind one NAT; that address only, the teacher's own or one
group of the members); the per-address limits on answers, streams and runs sent then count
that address's members. The teacher may remove a member: its answer and runs leave the class
and its cookie cannot join again. A member chooses the name the teacher sees (`display_name`:
text a stranger typed, so cleaned, capped, made unique in the class, and refused where it only
looks like another's (lookalikes.py); the alias stays the handle the teacher removes by).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field, fields

from app.web.errors import AppError

from .lookalikes import invisible, lookalike_key, mixes_scripts
from .moving_on import moved_on, place

__all__ = ["ClassError", "ClassState", "Member", "check_view", "display_name", "per_address_limit"]

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud and typed on phones
CODE_LENGTH = 6
CODE_PATTERN = re.compile(f"[{CODE_ALPHABET}]{{{CODE_LENGTH}}}")
MAX_QUERY = 2000
MAX_CHOICES = 12
MAX_TEXT = 300
MAX_SUBMISSIONS = 200
MAX_ANSWERS = 1000  # per question: a class, not a poll of the internet
STREAMS_PER_CLIENT = 4  # a student's tabs in one class
MAX_MEMBERS = 2000  # browsers per class
MAX_REMOVED = 10_000  # browsers a class bars: past it, a new class
MAX_TURNED_AWAY = 1000  # browsers refused for their address, counted for the teacher's hint
WRONG_CODES_PER_MINUTE = 30  # per address: a person mistypes a few, a script tries thousands
# and on the whole server, from every address together: a code is the way into a class, and a
# member may run code, so many addresses (an IPv6 /48) must not guess it either; past it only
# the neighbourhoods that guessed are refused (wrong_codes.py)
WRONG_CODES_PER_MINUTE_IN_ALL = 600
SUBMISSIONS_PER_STUDENT = 5  # runs one student may send to the teacher's list
MAX_NAME = 40  # characters of a member's display name: a name on a list, not a message
RENAMES_PER_MEMBER = 20  # each rename redraws the teacher's list: a few typos, not a ticker
RUNS_REMEMBERED = 10_000  # whose each run is (the run store keeps 500 by default)
STREAMS_PER_CLASS = 500
STREAMS_IN_ALL = 3000
# the pages a class can be shown: the index, a scenario, a stored run
VIEW_PATH = re.compile(r"/|/scenarios/[a-z][a-z0-9_]{0,63}|/runs/[A-Za-z0-9_-]{1,64}")
QUERY = re.compile(r"[A-Za-z0-9_.,~%=&+*-]*")  # what URLSearchParams leaves unescaped



class ClassError(AppError):
    """A request the class cannot take: an AppError (http/error_handler.py answers it), named
    so that a caller can tell a class's refusals from others."""


def check_view(path: str, query: str) -> dict:
    """A view a teacher may show: one of this app's own pages, with a plain query string."""
    if not isinstance(path, str) or not VIEW_PATH.fullmatch(path):
        raise ClassError(422, "a class can be shown the index (/), a scenario "
                              "(/scenarios/NAME) or a run (/runs/ID)")
    query = "" if query is None else query
    if not isinstance(query, str) or len(query) > MAX_QUERY or \
            not QUERY.fullmatch(query := query.removeprefix("?")):
        raise ClassError(422, f"the view's query must be a URL query of at most {MAX_QUERY} "
                              "characters")
    return {"path": path, "query": query}


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
        raise ClassError(422, f"{what} must be text of 1 to {MAX_TEXT} characters")
    return value.strip()


_SPACES = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85"
# the names the teacher's lists use for the teacher ("the teacher" sent this run), and the
# start of every alias (student-1a2b3c), compared by how they look (lookalikes.py): "Τeacher"
# with a Greek Tau, "ѕtudent-…" with a Cyrillic dze are the same words on the projector
_TEACHER_LIKE = frozenset(lookalike_key(n) for n in ("teacher", "the teacher"))
_ALIAS_START = lookalike_key("student-")


def display_name(value: object) -> str:
    """A name a student typed, as others may be shown it: NFKC-normalised; control, format
    (bidirectional overrides, zero-width characters), private-use, unassigned and other
    invisible characters (the Hangul fillers: `invisible`) dropped; every run of spaces one
    space; at most two combining marks on a letter; at most MAX_NAME characters. Empty once
    cleaned, mixing scripts (Latin with Cyrillic or Greek letters: `mixes_scripts`), or
    looking like the teacher's name or a member's alias (student-…, by UTS #39 skeleton:
    `lookalike_key`), it is refused (422) with what to do. Pages still put it in as text,
    never as markup (classroom.js: textContent inside <bdi>)."""
    if not isinstance(value, str):
        raise ClassError(422, f"a name is text of 1 to {MAX_NAME} characters", "bad_name")
    kept: list[str] = []
    marks = 0
    for ch in unicodedata.normalize("NFKC", value):
        kind = unicodedata.category(ch)
        if kind in ("Mn", "Me"):
            marks += 1
            if marks > 2:  # "Zalgo" text: marks stacked until they cover the lines around
                continue
        else:
            marks = 0
        if ch in _SPACES or kind[0] == "Z":
            kept.append(" ")
        elif kind[0] != "C" and not invisible(ch):  # Cc, Cf, Cs, Co, Cn; blank letters
            kept.append(ch)
    name = " ".join("".join(kept).split())[:MAX_NAME].strip()
    if not name:
        raise ClassError(422, f"type a name of 1 to {MAX_NAME} letters: the teacher sees it "
                              "beside your answers and the runs you send", "bad_name")
    if mixes_scripts(name):
        raise ClassError(422, f"\u201c{name}\u201d mixes letters of different alphabets (such "
                              "as Latin with Cyrillic or Greek), which can make one name look "
                              "like another: type your name in one alphabet", "bad_name")
    key = lookalike_key(name)
    if key in _TEACHER_LIKE or key.startswith(_ALIAS_START):
        raise ClassError(422, "that name is, or looks like, the teacher's or a member's alias "
                              "(student-…): choose your own", "bad_name")
    return name


@dataclass
class Member:
    """A browser that joined a class: what the teacher sees of it (`alias`, and its address
    only as a group, "address 2") and what its limits count (`address`)."""
    client: str
    address: str
    alias: str
    joined: float = field(default_factory=time.time)  # wall clock: every web process's
    name: str | None = None  # the display name it chose (display_name), unique in its class
    renames: int = 0

    @property
    def shown(self) -> str:
        """How the teacher's lists name it: its display name, or its alias until it has one."""
        return self.name or self.alias


@dataclass
class ClassState:
    """Everything about one class that every web process must agree on."""
    code: str
    teacher: str  # the client key (client_keys.py) of the browser that started it
    # who started it, as the admin page names them (admin/overview.py): "token" for the
    # server's token, "teacher:NAME" for a named teacher's, "this_machine" without a token
    teacher_name: str = ""
    created: float = field(default_factory=time.time)  # wall clock: every process's
    version: int = 0  # changes every reader sees
    audience: int = 0  # changes only the teacher sees: the tally, who joined, names
    view: dict | None = None
    question: dict | None = None  # {id, prompt, choices, answer, revealed, at}
    answers: dict[str, int] = field(default_factory=dict)  # client key -> choice
    submissions: list[dict] = field(default_factory=list)
    # one address may have at most `people` members (cookies are free: a machine could
    # otherwise be a whole class) unless the room shares one address (the teacher says so);
    # votes, streams and runs sent in count per address too, as many people as it has members
    people: int = 4
    # the one address the teacher said the room shares (one NAT): only from it may more than
    # `people` browsers join, and only its members count as people past the setting
    shared_at: str = ""
    answered_from: dict[str, str] = field(default_factory=dict)  # client -> its address
    sent_by: dict[str, int] = field(default_factory=dict)  # client or address -> runs sent
    sent_from: dict[str, tuple[str, str]] = field(default_factory=dict)  # run -> client, address
    members: dict[str, Member] = field(default_factory=dict)  # client -> its membership
    removed: set[str] = field(default_factory=set)  # clients the teacher removed: barred
    # address -> members removed from it: each keeps its place among the address's `people`,
    # or a removed student would be back at once with a fresh cookie (issue 38)
    removed_at: dict[str, int] = field(default_factory=dict)
    at_address: dict[str, int] = field(default_factory=dict)  # address -> its members
    places: dict[str, int] = field(default_factory=dict)  # address -> "address N" for the teacher
    turned_away: set[str] = field(default_factory=set)  # refused for their address
    ended: bool = False

    # ---- kept as JSON ----------------------------------------------------------------------

    def to_dict(self) -> dict:
        """This state as JSON-ready data: `dataclasses.asdict`, its sets as sorted lists."""
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> ClassState:
        """The state `to_dict` made; also a row the previous release wrote (its members a
        list, not a mapping by client)."""
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in data.items() if k in known})
        members = data.get("members") or {}
        if isinstance(members, list):  # the previous release's rows
            members = {m["client"]: m for m in members}
        state.members = {client: Member(**m) for client, m in members.items()}
        state.removed, state.turned_away = set(state.removed), set(state.turned_away)
        state.sent_from = {run: (by[0], by[1]) for run, by in state.sent_from.items()}
        return state

    # ---- who is in it --------------------------------------------------------------------------

    def admit(self, client: str, address: str = "") -> None:
        """Make `client` a member (the teacher need not be one), or say why not: the teacher
        removed it (403), its address has `people` members already and the teacher has not said
        the room shares one address (429, with what to ask), or the class is full (429)."""
        if client == self.teacher or client in self.members:
            return
        if client in self.removed:
            raise ClassError(403, "the teacher removed this browser from the class, so it "
                                  "cannot join again; if that was a mistake, talk to the "
                                  "teacher", "removed_from_class")
        if len(self.members) >= MAX_MEMBERS:
            raise ClassError(429, f"this class has {MAX_MEMBERS} members, as many as one "
                                  "class may", "class_full")
        if address and address != self.shared_at and \
                self.at_address.get(address, 0) + self.removed_at.get(address, 0) >= self.people:
            removed = self.removed_at.get(address, 0)
            if client not in self.turned_away and len(self.turned_away) < MAX_TURNED_AWAY:
                self.turned_away.add(client)
                self.audience += 1  # the teacher's page says some were turned away
            raise ClassError(429, f"{self.people} browsers from this network address have "
                                  "joined this class already"
                                  f"{f' (the teacher removed {removed})' if removed else ''}"
                                  ", as many as one address may "
                                  "stand for; if the whole room shares one network address, "
                                  "ask the teacher to switch on \u201cThis room shares one "
                                  "network address\u201d (under Members in the class bar), "
                                  "then reload this page", "address_full")
        self.members[client] = Member(client, address, self._unique_alias(client))
        self.at_address[address] = self.at_address.get(address, 0) + 1
        self.places.setdefault(address, len(self.places) + 1)
        self.turned_away.discard(client)
        self.audience += 1

    def _unique_alias(self, client: str) -> str:
        """`_alias`, longer where two browsers of this class would share it (six hex digits
        collide now and then in a class of hundreds): the teacher removes a member by it."""
        taken = {m.alias for m in self.members.values()}
        for length in (6, 8, 12, 64):
            alias = _alias(client, length)
            if alias not in taken:
                return alias
        raise AssertionError("two browsers with one SHA-256")  # pragma: no cover

    def rename(self, client: str, name: object) -> str:
        """A member chooses the name the teacher sees (`display_name`); one another member has
        already is made distinguishable ("Ana (2)"), and one that only looks like another
        member's ("Αna" with a Greek Alpha, "Kirn" beside "Kim": the same UTS #39 skeleton) is
        refused (409): a number would not tell them apart on the teacher's list. Its answer and
        runs sent are listed under the new name at once. The name it ends up with."""
        if client == self.teacher:
            raise ClassError(409, "the teacher needs no name here: students choose theirs")
        self.require_member(client)
        member = self.members[client]
        wanted = display_name(name)
        if wanted == member.name:
            return wanted
        if member.renames >= RENAMES_PER_MEMBER:
            raise ClassError(429, f"this browser has changed its name {RENAMES_PER_MEMBER} "
                                  "times in this class, as often as one may")
        others = [m.name for m in self.members.values() if m.name and m is not member]
        taken = {other.casefold() for other in others}
        looks = {lookalike_key(other) for other in others}
        if wanted.casefold() not in taken and lookalike_key(wanted) in looks:
            raise ClassError(409, f"\u201c{wanted}\u201d looks like the name of another member "
                                  "of this class, and the teacher could not tell you apart: "
                                  "choose another name (add your family name or its initial, "
                                  "for instance)", "name_looks_taken")
        unique, n = wanted, 1
        while unique.casefold() in taken or lookalike_key(unique) in looks:
            n += 1
            suffix = f" ({n})"
            unique = wanted[:MAX_NAME - len(suffix)].rstrip() + suffix
        member.name = unique
        member.renames += 1
        self.audience += 1  # the teacher's lists show it
        return unique

    def name_teacher(self, holder: str) -> None:
        """Who started the class (auth.token_holder's word), for the admin page; no reader's
        mark moves: nobody's page shows it."""
        self.teacher_name = holder[:200]

    def knows(self, client: str) -> bool:
        return client == self.teacher or client in self.members

    def barred(self, client: str) -> bool:
        return client in self.removed

    def require_member(self, client: str) -> None:
        """Only members (and the teacher) answer, follow and send runs: the routes admit a
        browser first (Classroom.get), so this holds unless a caller skipped it."""
        if not self.knows(client):
            raise ClassError(403, "only the class's members answer, follow it and send runs: "
                                  f"open its link (/c/{self.code}) in a browser first",
                             "not_a_member")

    def people_at(self, address: str) -> int:
        """How many people `address` stands for in this class: its members, never fewer than
        `people` (so a room behind one NAT has a vote, pages and runs per student)."""
        return max(self.people, self.at_address.get(address, 0))

    @property
    def shared_address(self) -> bool:
        return bool(self.shared_at)

    def share_address(self, on: object, teacher_address: str = "") -> None:
        """The teacher says which network address the room shares: `True`, the teacher's own
        (the usual case: the teacher's laptop is in the room), or a group of the members list
        ("address 2"); every browser from that address, and that address only, may join (up to
        MAX_MEMBERS). `False`: none; new browsers past `people` from one address are refused
        (members already in stay)."""
        if on is False:
            address = ""
        elif on is True:
            address = teacher_address
        elif isinstance(on, str):
            address = next((a for a, n in self.places.items() if f"address {n}" == on), "")
            if not address:
                raise ClassError(422, f"no group {on[:40]!r} among the members: name one the "
                                      "members list shows (\"address 1\", ...)")
        else:
            raise ClassError(422, "shared_address is true (your own address), false, or a "
                                  "group of the members list (\"address 2\")")
        if address != self.shared_at:
            self.shared_at = address
            if address:
                self.turned_away.clear()  # they may join now: the hint has done its work
            self.audience += 1

    def remove(self, alias: object) -> None:
        """The teacher removes a member: its answer leaves the tally, its runs the list, its
        event streams end (woken now, they see it is barred), and its cookie cannot join
        again (a new browser joins as a new member, whom the teacher sees)."""
        member = next((m for m in self.members.values() if m.alias == alias), None)
        if member is None:
            raise ClassError(404, f"no member {str(alias)[:80]!r} in this class (removed "
                                  "already?)", "no_member")
        if len(self.removed) >= MAX_REMOVED:
            raise ClassError(429, f"this class has barred {MAX_REMOVED:,} browsers already: "
                                  "end it and start a new one", "too_many_removed")
        client = member.client
        del self.members[client]
        self.removed.add(client)
        left = self.at_address.get(member.address, 0) - 1
        if left > 0:
            self.at_address[member.address] = left
        else:
            self.at_address.pop(member.address, None)
        if member.address:
            self.removed_at[member.address] = self.removed_at.get(member.address, 0) + 1
        self.answers.pop(client, None)
        self.answered_from.pop(client, None)
        gone = {run for run, (by, _) in self.sent_from.items() if by == client}
        if gone:
            self.submissions = [s for s in self.submissions if s["run"] not in gone]
            for run in gone:
                _, address = self.sent_from.pop(run)
                if address:  # its runs no longer count against its address's share
                    key = "address:" + address
                    self.sent_by[key] = max(0, self.sent_by.get(key, 0) - 1)
        self.audience += 1

    # ---- changes ------------------------------------------------------------------------------

    def show(self, path: str, query: str) -> None:
        view = check_view(path, query)
        if view == self.view:
            return
        self.view = view
        self.version += 1
        q = self.question
        if q is None:
            return
        # the teacher moved on (another page, variant or presenter step: moving_on.py): the
        # question goes away with the place it was about, on every page of the class
        if moved_on(q.get("at"), place(view)):
            self.question = None
            self.answers = {}
            self.answered_from = {}
        elif q.get("at") is None or (q["at"]["say"] is None and place(view)["say"] is not None):
            q["at"] = place(view)  # asked before a view, or on the page it now presents

    def ask(self, prompt: object, choices: object, answer: object) -> dict:
        if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
            raise ClassError(422, f"a question needs 2 to {MAX_CHOICES} choices")
        texts = [_text(c, "each choice") for c in choices]
        if not isinstance(answer, int) or isinstance(answer, bool) or \
                not 0 <= answer < len(texts):
            raise ClassError(422, "the answer must be the index of one of the choices")
        self.question = {"id": secrets.token_hex(4), "prompt": _text(prompt, "the question"),
                         "choices": texts, "answer": answer, "revealed": False,
                         "at": place(self.view)}  # where it was asked: moving_on.py
        self.answers = {}
        self.answered_from = {}
        self.version += 1
        return self.question

    def answer(self, client: str, question_id: object, choice: object,
               address: str = "") -> None:
        if client == self.teacher:
            raise ClassError(409, "the teacher asks; the students answer")
        self.require_member(client)
        q = self.question
        if q is None or question_id != q["id"]:
            raise ClassError(409, "that question is no longer asked: the page shows the new one")
        if q["revealed"]:
            raise ClassError(409, "the answer has been revealed: answers are closed")
        if not isinstance(choice, int) or isinstance(choice, bool) or \
                not 0 <= choice < len(q["choices"]):
            raise ClassError(422, "pick one of the choices")
        if client not in self.answers and len(self.answers) >= MAX_ANSWERS:
            raise ClassError(429, f"this question has {MAX_ANSWERS} answers already")
        if client not in self.answers and address and \
                sum(1 for a in self.answered_from.values() if a == address) >= \
                self.people_at(address):
            raise ClassError(429, per_address_limit(self.people_at(address),
                                               "answers to this question"))
        if self.answers.get(client) == choice:
            return  # the same answer again: nothing changed, nobody to tell
        self.answers[client] = choice
        self.answered_from[client] = address
        self.audience += 1

    def reveal(self) -> None:
        if self.question is None:
            raise ClassError(409, "there is no question to reveal")
        self.question["revealed"] = True
        self.version += 1

    def clear_question(self) -> None:
        self.question = None
        self.answers = {}
        self.answered_from = {}
        self.version += 1

    def submit(self, client: str, run_id: str, name: str, address: str = "",
               owner: str | None = None) -> None:
        """A member sends a run to the teacher's list: only a run it started itself (`owner`,
        the run queue's `started_by`); the teacher may list any."""
        self.require_member(client)
        if client != self.teacher and owner != client:
            raise ClassError(403, "only your own runs can be sent to the teacher: this one was "
                                  "started by someone else (or before the server restarted); "
                                  "run the script yourself (\u201cEdit and run again\u201d), "
                                  "then send that run", "not_your_run")
        if len(self.submissions) >= MAX_SUBMISSIONS:
            raise ClassError(429, f"this class has {MAX_SUBMISSIONS} runs sent in already")
        if any(s["run"] == run_id for s in self.submissions):
            return
        if self.sent_by.get(client, 0) >= SUBMISSIONS_PER_STUDENT:
            raise ClassError(429, f"you have sent the teacher {SUBMISSIONS_PER_STUDENT} runs "
                                  "already: that is as many as one student may")
        if address and self.sent_by.get("address:" + address, 0) >= \
                SUBMISSIONS_PER_STUDENT * self.people_at(address):
            raise ClassError(429, per_address_limit(self.people_at(address),
                                               "runs sent to the teacher"))
        self.sent_by[client] = self.sent_by.get(client, 0) + 1
        if address:
            key = "address:" + address
            self.sent_by[key] = self.sent_by.get(key, 0) + 1
        self.sent_from[run_id] = (client, address)
        # who sent it is looked up when the list is shown: a name chosen later shows there too
        self.submissions.append({"run": run_id, "link": f"/runs/{run_id}", "name": name[:100],
                                 "at": time.time()})
        self.version += 1

    def sent(self, run_id: str) -> bool:
        return run_id in self.sent_from

    def whose(self, run_id: str, started_by: str | None) -> str | None:
        """Whose run it is, as another member's page titles it: the name of the member who
        sent it (or its alias), "the teacher" for one the teacher started, else None."""
        if run_id in self.sent_from:
            return self._sender(run_id)["by"]
        if started_by is not None and started_by == self.teacher:
            return "the teacher"
        member = self.members.get(started_by or "")
        return member.shown if member is not None else None

    def _sender(self, run_id: str) -> dict:
        """Who sent a run, as the teacher's list says it: the member's name (or alias until it
        has one) and its alias, or the teacher."""
        client = self.sent_from.get(run_id, ("", ""))[0]
        member = self.members.get(client)
        if member is None:
            return {"by": "the teacher", "alias": None}
        return {"by": member.shown, "alias": member.alias}

    def end(self) -> None:
        self.ended = True
        self.version += 1

    # ---- what a reader sees -----------------------------------------------------------------

    def snapshot(self, client: str, followers: int = 0) -> dict:
        """The state as `client` may see it: the teacher sees the answer, the tally and who
        sent what; a student sees the question, their own answer, and the answer once it is
        revealed. `followers`: how many follow the class, which each process counts itself
        (the session's streams)."""
        teacher = client == self.teacher
        out = {"code": self.code, "version": self.version, "role": "teacher" if teacher else
               "student", "view": self.view, "ended": self.ended, "question": None,
               "link": f"/c/{self.code}"}
        q = self.question
        if q is not None:
            shown = {k: q[k] for k in ("id", "prompt", "choices", "revealed")}
            if teacher or q["revealed"]:
                shown["answer"] = q["answer"]
                tally = [0] * len(q["choices"])
                for choice in self.answers.values():
                    tally[choice] += 1
                shown["tally"] = tally
            shown["mine"] = self.answers.get(client)
            out["question"] = shown
        member = self.members.get(client)
        if member is not None:
            out["me"] = {"name": member.name, "alias": member.alias}
        if teacher:
            out["followers"] = followers
            out["submissions"] = [{**s, **self._sender(s["run"])} for s in self.submissions]
            out["members"] = len(self.members)
            out["shared_address"] = self.shared_address
            out["turned_away"] = len(self.turned_away)
        return out

    def roster(self, teacher_address: str = "", streams: dict[str, int] | None = None) -> dict:
        """The members as the teacher sees them: alias, display name (None until it chose
        one), seconds since joining, whether it
        answered the question asked now (None: none asked), its open pages, its runs sent,
        and its address as a group ("address 2", numbered as they first joined): the page
        tells a room behind one NAT from strangers, and never shows an address. `streams`:
        each member's open pages, as this process counts them."""
        now = time.time()
        asked = self.question is not None
        sent = Counter(by for by, _ in self.sent_from.values())
        members = [{"alias": m.alias, "name": m.name, "joined_s": round(now - m.joined),
                    "answered": (m.client in self.answers) if asked else None,
                    "streams": (streams or {}).get(m.client, 0),
                    "runs_sent": sent[m.client],
                    "address": f"address {self.places[m.address]}"}
                   for m in sorted(self.members.values(), key=lambda m: m.joined)]
        groups = [{"name": f"address {n}", "members": self.at_address[a],
                   "yours": a == teacher_address, "shared": a == self.shared_at}
                  for a, n in sorted(self.places.items(), key=lambda p: p[1])
                  if self.at_address.get(a)]
        return {"count": len(members), "shared_address": self.shared_address,
                "people": self.people, "turned_away": len(self.turned_away),
                "removed": len(self.removed), "addresses": groups, "members": members}


def per_address_limit(people: int, what: str) -> str:
    return (f"one network address may stand for at most {people} people here, and it has as "
            f"many {what} as that; if your class shares one network address, ask the teacher "
            "to switch on \u201cThis room shares one network address\u201d (under Members in the "
            "class bar): then every student who joined from it counts")


def _alias(client: str, length: int = 6) -> str:
    """A short stable name for a student (their cookie is a secret: never show it)."""
    return "student-" + hashlib.sha256(client.encode()).hexdigest()[:length]


def _jsonable(value):
    """`asdict`'s output as JSON takes it: sets sorted into lists, tuples as lists."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
