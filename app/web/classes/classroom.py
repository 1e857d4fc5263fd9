"""Class sessions: a teacher shows, the students' pages follow.

A session is a short code (`/c/CODE`), the teacher (the browser that started it, by its client
cookie), and one state: the view the teacher shows (a page path and its query: every view of
this app lives in its URL), a question with the students' answers, and the runs students sent
in. Every change bumps the session's version and wakes every open event stream; a stream sends
the whole state (what the reader may see of it) with the version as the event id. A student
whose network dropped reconnects with `Last-Event-ID` and gets the current state at once if it
is newer: nothing is replayed, because the newest state is all a follower needs.

A browser that opens a class becomes a member (`Member`): its address, the alias the teacher
sees, when it joined. One address may have at most `people` members (cookies are free: one
machine could otherwise be a whole class) unless the teacher says the room shares one network
address (`shared_address`: a classroom behind one NAT; that address only, the teacher's own or
one group of the members); the per-address limits on answers, streams and runs sent then count
that address's members. The teacher sees the members and may
remove one: its answer and runs leave the class, its streams end, and its cookie cannot join
again. A member chooses the name the teacher sees (`display_name`: text a stranger typed, so
cleaned, capped and made unique in the class; the alias stays the handle the teacher removes by).

Membership is also a right: a member of an open class may run code on the server without its
token (auth.py asks `Classroom.member_of`), within the same per-person and per-address limits as
anyone; the right ends when the class ends or the teacher removes the member. A run is its
starter's (`Classroom.note_run`, `started_by`): a student sends the teacher only their own runs.

Everything here runs on the server's event loop (the routes are `async def`), so the state
needs no lock; the exceptions, `Classroom.people_at` (read by the run queue's threads) and
`Classroom.member_of` (by the pages' threads: may this browser run code?), only read.
Torch-free, and it never sees user code: a view is a path and a query string.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import secrets
import time
import unicodedata
from collections import Counter, deque
from dataclasses import dataclass, field

from app.lru import LRU
from app.web.client_keys import is_browser
from app.web.errors import AppError
from app.web.settings import default_of

__all__ = ["ClassError", "ClassSession", "Classroom", "Member", "check_view", "display_name"]

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
# member may run code, so many addresses (an IPv6 /48) must not guess it either
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
    """A request the session cannot take: an AppError (errors.py answers it), named so that a
    caller can tell a class's refusals from others."""


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
_ALIAS_LIKE = re.compile(r"student-[0-9a-f]*")
_TEACHER_LIKE = {"teacher", "the teacher"}


def display_name(value: object) -> str:
    """A name a student typed, as others may be shown it: NFKC-normalised; control, format
    (bidirectional overrides, zero-width characters), private-use and unassigned characters
    dropped; every run of spaces one space; at most two combining marks on a letter; at most
    MAX_NAME characters. Empty once cleaned, or posing as the teacher or a member's alias
    (student-…), it is refused (422) with what to do. Pages still put it in as text, never
    as markup (classroom.js: textContent inside <bdi>)."""
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
        elif kind[0] != "C":  # Cc, Cf, Cs, Co, Cn
            kept.append(ch)
    name = " ".join("".join(kept).split())[:MAX_NAME].strip()
    if not name:
        raise ClassError(422, f"type a name of 1 to {MAX_NAME} letters: the teacher sees it "
                              "beside your answers and the runs you send", "bad_name")
    key = name.casefold()
    if key in _TEACHER_LIKE or _ALIAS_LIKE.fullmatch(key):
        raise ClassError(422, "that name is the teacher's or looks like a member's alias "
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
class ClassSession:
    code: str
    teacher: str  # the client key (clients.py) of the browser that started it
    created: float = field(default_factory=time.time)
    touched: float = field(default_factory=time.monotonic)
    version: int = 0
    view: dict | None = None
    question: dict | None = None  # {id, prompt, choices, answer, revealed}
    answers: dict[str, int] = field(default_factory=dict)  # client key -> choice
    submissions: list[dict] = field(default_factory=list)
    followers: dict[str, int] = field(default_factory=dict)  # following student -> streams
    streams: dict[str, int] = field(default_factory=dict)  # client -> open event streams
    # one address may have at most `people` members (cookies are free: a machine could
    # otherwise be a whole class) unless the room shares one address (the teacher says so);
    # votes, streams and runs sent in count per address too, as many people as it has members
    people: int = 4
    # the one address the teacher said the room shares (one NAT): only from it may more than
    # `people` browsers join, and only its members count as people past the setting
    shared_at: str = ""
    answered_from: dict[str, str] = field(default_factory=dict)  # client -> its address
    address_streams: dict[str, int] = field(default_factory=dict)
    sent_by: dict[str, int] = field(default_factory=dict)  # client or address -> runs sent
    sent_from: dict[str, tuple[str, str]] = field(default_factory=dict)  # run -> client, address
    members: dict[str, Member] = field(default_factory=dict)  # client -> its membership
    removed: set[str] = field(default_factory=set)  # clients the teacher removed: barred
    at_address: dict[str, int] = field(default_factory=dict)  # address -> its members
    places: dict[str, int] = field(default_factory=dict)  # address -> "address N" for the teacher
    turned_away: set[str] = field(default_factory=set)  # refused for their address
    audience: int = 0  # changes only the teacher sees: the tally, who joined, names
    # the followers' count, which only this process knows (its own streams): apart from
    # `audience`, which a shared classroom keeps in PostgreSQL with the rest of the state
    followed: int = 0
    ended: bool = False
    # students' snapshots as JSON text for this version, by the answer chosen (snapshot_text)
    _texts: dict = field(default_factory=dict)
    _texts_version: int = -1
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _teacher_changed: asyncio.Event = field(default_factory=asyncio.Event)

    # ---- its state, as a shared classroom keeps it -----------------------------------------

    def to_state(self) -> dict:
        """Everything every web process must agree on, as JSON: not the streams, followers
        and wake-ups, which are each process's own."""
        return {"code": self.code, "teacher": self.teacher, "created": self.created,
                "version": self.version, "audience": self.audience, "view": self.view,
                "question": self.question, "answers": self.answers,
                "submissions": self.submissions, "people": self.people,
                "shared_at": self.shared_at, "answered_from": self.answered_from,
                "sent_by": self.sent_by,
                "sent_from": {k: list(v) for k, v in self.sent_from.items()},
                "members": [{"client": m.client, "address": m.address, "alias": m.alias,
                             "joined": m.joined, "name": m.name, "renames": m.renames}
                            for m in self.members.values()],
                "removed": sorted(self.removed), "at_address": self.at_address,
                "places": self.places, "turned_away": sorted(self.turned_away),
                "ended": self.ended}

    def load_state(self, state: dict) -> None:
        """Take `state` (to_state's) as this session's; its streams and followers stay."""
        self.version, self.audience = state["version"], state["audience"]
        self.created, self.view, self.question = state["created"], state["view"], \
            state["question"]
        self.answers, self.submissions = dict(state["answers"]), list(state["submissions"])
        self.people, self.shared_at = state["people"], state["shared_at"]
        self.answered_from, self.sent_by = dict(state["answered_from"]), dict(state["sent_by"])
        self.sent_from = {k: (v[0], v[1]) for k, v in state["sent_from"].items()}
        self.members = {m["client"]: Member(m["client"], m["address"], m["alias"],
                                            m["joined"], m["name"], m["renames"])
                        for m in state["members"]}
        self.removed, self.turned_away = set(state["removed"]), set(state["turned_away"])
        self.at_address, self.places = dict(state["at_address"]), dict(state["places"])
        self.ended = state["ended"]
        self._texts = {}  # the same version may come back with other contents (a rollback)

    @classmethod
    def from_state(cls, state: dict) -> ClassSession:
        session = cls(code=state["code"], teacher=state["teacher"])
        session.load_state(state)
        return session

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
                self.at_address.get(address, 0) >= self.people:
            if client not in self.turned_away and len(self.turned_away) < MAX_TURNED_AWAY:
                self.turned_away.add(client)
                self._bump_teacher()  # the teacher's page says some were turned away
            raise ClassError(429, f"{self.people} browsers from this network address have "
                                  "joined this class already, as many as one address may "
                                  "stand for; if the whole room shares one network address, "
                                  "ask the teacher to switch on \u201cThis room shares one "
                                  "network address\u201d (under Members in the class bar), "
                                  "then reload this page", "address_full")
        self.members[client] = Member(client, address, self._unique_alias(client))
        self.at_address[address] = self.at_address.get(address, 0) + 1
        self.places.setdefault(address, len(self.places) + 1)
        self.turned_away.discard(client)
        self._bump_teacher()

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
        already is made distinguishable ("Ana (2)"). Its answer and runs sent are listed under
        the new name at once. The name it ends up with."""
        if client == self.teacher:
            raise ClassError(409, "the teacher needs no name here: students choose theirs")
        self._member(client)
        member = self.members[client]
        wanted = display_name(name)
        if wanted == member.name:
            return wanted
        if member.renames >= RENAMES_PER_MEMBER:
            raise ClassError(429, f"this browser has changed its name {RENAMES_PER_MEMBER} "
                                  "times in this class, as often as one may")
        taken = {m.name.casefold() for m in self.members.values()
                 if m.name and m is not member}
        unique, n = wanted, 1
        while unique.casefold() in taken:
            n += 1
            suffix = f" ({n})"
            unique = wanted[:MAX_NAME - len(suffix)].rstrip() + suffix
        member.name = unique
        member.renames += 1
        self._bump_teacher()  # the teacher's lists show it
        return unique

    def knows(self, client: str) -> bool:
        return client == self.teacher or client in self.members

    def barred(self, client: str) -> bool:
        return client in self.removed

    def _member(self, client: str) -> None:
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
            self._bump_teacher()

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
        self._wake_students()  # its streams notice they are barred and end
        self._bump_teacher()

    # ---- changes ------------------------------------------------------------------------------

    def _bump(self) -> None:
        """A change every reader sees: every stream wakes."""
        self.version += 1
        self.touched = time.monotonic()
        self._wake_students()
        self._wake_teacher()

    def _bump_teacher(self) -> None:
        """A change only the teacher sees (a count, the tally): the students' streams sleep on,
        so a hundred students joining is not a hundred times a hundred events."""
        self.audience += 1
        self.touched = time.monotonic()
        self._wake_teacher()

    def _wake_students(self) -> None:
        woken, self._changed = self._changed, asyncio.Event()
        woken.set()

    def _wake_teacher(self) -> None:
        woken, self._teacher_changed = self._teacher_changed, asyncio.Event()
        woken.set()

    def mark(self, client: str) -> int:
        """The event id of what `client` sees, the same on every web process: students see
        `version`; the teacher also sees the tally and who joined (`audience`). Both only
        grow. The followers' count (`followed`) is each process's own: a teacher's stream
        watches it apart (`changed`), and sends it with the same id."""
        return self.version + (self.audience if client == self.teacher else 0)

    def show(self, path: str, query: str) -> None:
        view = check_view(path, query)
        if view != self.view:
            self.view = view
            self._bump()

    def ask(self, prompt: object, choices: object, answer: object) -> dict:
        if not isinstance(choices, list) or not 2 <= len(choices) <= MAX_CHOICES:
            raise ClassError(422, f"a question needs 2 to {MAX_CHOICES} choices")
        texts = [_text(c, "each choice") for c in choices]
        if not isinstance(answer, int) or isinstance(answer, bool) or \
                not 0 <= answer < len(texts):
            raise ClassError(422, "the answer must be the index of one of the choices")
        self.question = {"id": secrets.token_hex(4), "prompt": _text(prompt, "the question"),
                         "choices": texts, "answer": answer, "revealed": False}
        self.answers = {}
        self.answered_from = {}
        self._bump()
        return self.question

    def answer(self, client: str, question_id: object, choice: object,
               address: str = "") -> None:
        if client == self.teacher:
            raise ClassError(409, "the teacher asks; the students answer")
        self._member(client)
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
            raise ClassError(429, _per_address(self.people_at(address),
                                               "answers to this question"))
        if self.answers.get(client) == choice:
            return  # the same answer again: nothing changed, nobody to tell
        self.answers[client] = choice
        self.answered_from[client] = address
        self._bump_teacher()

    def reveal(self) -> None:
        if self.question is None:
            raise ClassError(409, "there is no question to reveal")
        self.question["revealed"] = True
        self._bump()

    def clear_question(self) -> None:
        self.question = None
        self.answers = {}
        self.answered_from = {}
        self._bump()

    def submit(self, client: str, run_id: str, name: str, address: str = "",
               owner: str | None = None) -> None:
        """A member sends a run to the teacher's list: only a run it started itself (`owner`,
        Classroom.started_by); the teacher may list any."""
        self._member(client)
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
            raise ClassError(429, _per_address(self.people_at(address),
                                               "runs sent to the teacher"))
        self.sent_by[client] = self.sent_by.get(client, 0) + 1
        if address:
            key = "address:" + address
            self.sent_by[key] = self.sent_by.get(key, 0) + 1
        self.sent_from[run_id] = (client, address)
        # who sent it is looked up when the list is shown: a name chosen later shows there too
        self.submissions.append({"run": run_id, "link": f"/runs/{run_id}", "name": name[:100],
                                 "at": time.time()})
        self._bump()

    def sent(self, run_id: str) -> bool:
        return run_id in self.sent_from

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
        self._bump()

    def open_stream(self, client: str, following: bool, in_all: int,
                    address: str = "") -> None:
        """Count a reader's event stream in (ClassError 429 past the caps). The teacher's tabs
        are not counted against their address: the students behind it may use its share."""
        self._member(client)
        if client == self.teacher:
            address = ""
        if self.streams.get(client, 0) >= STREAMS_PER_CLIENT:
            raise ClassError(429, f"this browser has {STREAMS_PER_CLIENT} pages following this "
                                  "class already: close one")
        if address and self.address_streams.get(address, 0) >= \
                STREAMS_PER_CLIENT * self.people_at(address):
            raise ClassError(429, _per_address(self.people_at(address),
                                               "pages following this class"))
        if sum(self.streams.values()) >= STREAMS_PER_CLASS or in_all >= STREAMS_IN_ALL:
            raise ClassError(429, "this class (or this server) has as many followers as it "
                                  "can serve")
        if address:  # counted only once every cap has let it in: close_stream undoes it
            self.address_streams[address] = self.address_streams.get(address, 0) + 1
        self.streams[client] = self.streams.get(client, 0) + 1
        if following:
            self._follow(client, +1)

    def close_stream(self, client: str, following: bool, address: str = "") -> None:
        if client == self.teacher:
            address = ""  # as open_stream counted it
        if address:
            count = self.address_streams.get(address, 0) - 1
            if count > 0:
                self.address_streams[address] = count
            else:
                self.address_streams.pop(address, None)
        left = self.streams.get(client, 0) - 1
        if left > 0:
            self.streams[client] = left
        else:
            self.streams.pop(client, None)
        if following:
            self._follow(client, -1)

    def _follow(self, client: str, step: int) -> None:
        """Followers are people (client keys), not tabs: the count changes only when one
        starts or stops following."""
        before = len(self.followers)
        count = self.followers.get(client, 0) + step
        if count > 0:
            self.followers[client] = count
        else:
            self.followers.pop(client, None)
        if len(self.followers) != before:
            self.followed += 1
            self.touched = time.monotonic()
            self._wake_teacher()

    # ---- what a reader sees -----------------------------------------------------------------

    def snapshot(self, client: str) -> dict:
        """The state as `client` may see it: the teacher sees the answer, the tally and who
        sent what; a student sees the question, their own answer, and the answer once it is
        revealed."""
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
            out["followers"] = len(self.followers)
            out["submissions"] = [{**s, **self._sender(s["run"])} for s in self.submissions]
            out["members"] = len(self.members)
            out["shared_address"] = self.shared_address
            out["turned_away"] = len(self.turned_away)
        return out

    def snapshot_text(self, client: str) -> str:
        """`snapshot(client)` as JSON text, for a stream. A change reaches every follower, so a
        student's text is made once per version (and per answer chosen: at most a dozen) and
        shared; only its own `me` is put in front. The teacher's is made for the teacher."""
        if client == self.teacher:
            return json.dumps(self.snapshot(client))
        mine = self.answers.get(client) if self.question is not None else None
        if self._texts_version != self.version:
            self._texts, self._texts_version = {}, self.version
        shared = self._texts.get(mine)
        if shared is None:
            state = self.snapshot(client)
            state.pop("me", None)
            shared = self._texts[mine] = json.dumps(state)
        member = self.members.get(client)
        if member is None:
            return shared
        me = json.dumps({"name": member.name, "alias": member.alias})
        return '{"me": ' + me + ", " + shared[1:]

    def roster(self, teacher_address: str = "") -> dict:
        """The members as the teacher sees them: alias, display name (None until it chose
        one), seconds since joining, whether it
        answered the question asked now (None: none asked), its open pages, its runs sent,
        and its address as a group ("address 2", numbered as they first joined): the page
        tells a room behind one NAT from strangers, and never shows an address."""
        now = time.time()
        asked = self.question is not None
        sent = Counter(by for by, _ in self.sent_from.values())
        members = [{"alias": m.alias, "name": m.name, "joined_s": round(now - m.joined),
                    "answered": (m.client in self.answers) if asked else None,
                    "streams": self.streams.get(m.client, 0),
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

    async def changed(self, client: str, after: int, timeout: float,
                      followed: int = -1) -> bool:
        """Wait until `client`'s mark is past `after`, or for the teacher the followers'
        count has moved from `followed` (True), or `timeout` passes (False); at once if the
        class ended or the teacher removed `client`."""
        teacher = client == self.teacher
        while self.mark(client) <= after and not (teacher and self.followed != followed) and \
                not self.ended and not self.barred(client):
            event = self._teacher_changed if teacher else self._changed
            try:
                # asyncio.timeout, not wait_for: a change wakes every follower at once, and
                # wait_for makes each of them a task of its own to wait in
                async with asyncio.timeout(timeout):
                    await event.wait()
            except TimeoutError:
                return False
        return True


def _per_address(people: int, what: str) -> str:
    return (f"one network address may stand for at most {people} people here, and it has as "
            f"many {what} as that; if your class shares one network address, ask the teacher "
            "to switch on \u201cThis room shares one network address\u201d (under Members in the "
            "class bar): then every student who joined from it counts")


def _alias(client: str, length: int = 6) -> str:
    """A short stable name for a student (their cookie is a secret: never show it)."""
    return "student-" + hashlib.sha256(client.encode()).hexdigest()[:length]


class Classroom:
    """Every open class session of this server, bounded in number and idle time."""

    def __init__(self, max_sessions: int = default_of("max_classes"),
                 idle_hours: float = 12,
                 people_per_address: int = default_of("per_address_people")) -> None:
        self.max_sessions = max_sessions
        self.people_per_address = people_per_address
        self.idle_seconds = idle_hours * 3600
        self.sessions: dict[str, ClassSession] = {}
        self.open_streams = 0  # event streams of every class, for the server-wide cap
        self._wrong_codes: LRU[deque] = LRU(10_000)  # address -> times of its wrong codes
        self._wrong_in_all: deque = deque()  # times of every wrong code, the last minute's
        self._started_by: LRU[str] = LRU(RUNS_REMEMBERED)  # run id -> its starter's client key

    def change(self, session: ClassSession, act):
        """`act(session)`, which changes the class: here, on the state in memory (every route
        runs on the event loop); a shared classroom (shared_classroom.py) applies it to the
        state in PostgreSQL and tells every web process."""
        return act(session)

    def start(self, teacher: str) -> ClassSession:
        self._expire()
        mine = [s for s in self.sessions.values() if s.teacher == teacher and not s.ended]
        if mine:
            return mine[0]  # one class per teacher's browser: starting again returns it
        if len(self.sessions) >= self.max_sessions:
            raise ClassError(429, f"this server has {self.max_sessions} class sessions open; "
                                  "end one (or wait for idle ones to expire) and try again")
        code = self._new_code()
        session = self.sessions[code] = ClassSession(code=code, teacher=teacher,
                                                     people=self.people_per_address)
        return session

    def get(self, code: str, address: str = "", client: str = "",
            join: bool = True) -> ClassSession:
        """The class with this code, which `client` joins (`ClassSession.admit`: refused if
        the teacher removed it or its address is full) unless `join` is False or `client` is
        no browser's cookie (a program, or a first page load, reads the class without joining:
        an address standing in for a person would take a member's place). Wrong codes are
        counted per address: past WRONG_CODES_PER_MINUTE in a minute, the address is refused
        (429) until the minute has passed, so codes cannot be tried by the thousand; a browser
        already in that class (`client`) is let through, so a room behind one address is not
        locked out by one guesser among it."""
        code = code.upper()
        session = self.sessions.get(code) if CODE_PATTERN.fullmatch(code) else None
        misses = self._wrong_codes.get(address) if address else None
        now = time.monotonic()
        while self._wrong_in_all and now - self._wrong_in_all[0] > 60:
            self._wrong_in_all.popleft()
        member = session is not None and client and session.knows(client)
        if len(self._wrong_in_all) >= WRONG_CODES_PER_MINUTE_IN_ALL and not member:
            raise ClassError(429, f"{WRONG_CODES_PER_MINUTE_IN_ALL} wrong class codes were tried "
                                  "on this server in the last minute (someone is guessing): wait "
                                  "a minute, then open the class's link again", "too_many_codes",
                             headers={"Retry-After": "60"})
        if misses is not None:
            while misses and now - misses[0] > 60:
                misses.popleft()
            if len(misses) >= WRONG_CODES_PER_MINUTE and not member:
                raise ClassError(429, f"{WRONG_CODES_PER_MINUTE} wrong class codes came from "
                                      "this address in a minute: wait a minute, then check the "
                                      "code with the teacher", "too_many_codes",
                                 headers={"Retry-After": "60"})
        if session is None:
            self._wrong_in_all.append(now)
            if address:
                if misses is None:
                    misses = deque()
                    self._wrong_codes.put(address, misses)
                misses.append(now)
            raise ClassError(404, f"there is no class {code[:12]!r} here: check the code, or "
                                  "ask the teacher for the link", "no_class")
        if client and join and is_browser(client) and not session.knows(client):
            self.change(session, lambda s: s.admit(client, address))
        return session

    def teaching(self, code: str, client: str, address: str = "") -> ClassSession:
        # not joined first: someone else's browser is told it is not the teacher, not that
        # its address is full
        session = self.get(code, address, client, join=False)
        if session.teacher != client:
            raise ClassError(403, "only the teacher who started this class can do that",
                             "not_the_teacher")
        if session.ended:
            raise ClassError(409, "this class has ended", "class_ended")
        return session

    def people_at(self, address: str) -> int:
        """How many people `address` stands for in the run queue (JobBook): the server's
        `people_per_address`, or its members in the open classes whose teacher said the room
        shares one network address, if more. Called from the queue's threads: it only reads
        (the list of sessions taken at once, then one lookup in each)."""
        shared = sum(s.at_address.get(address, 0) for s in list(self.sessions.values())
                     if s.shared_at == address and not s.ended)
        return max(self.people_per_address, shared)

    def member_of(self, client: str) -> ClassSession | None:
        """An open class `client` is a member of (not its teacher, not removed), or None: its
        membership is its right to run code without the server's token (auth.py). A cookie the
        server did not sign is an address here (clients.py), and an address is never a member.
        Read from the request threads too: the list of sessions is taken at once."""
        if not is_browser(client):
            return None
        for session in list(self.sessions.values()):
            if not session.ended and client in session.members:
                return session
        return None

    def note_run(self, client: str, run_id: str) -> None:
        """`client` started `run_id` (POST /api/runs): it alone may send it to a teacher."""
        self._started_by.put(run_id, client)

    def started_by(self, run_id: str) -> str | None:
        return self._started_by.get(run_id)

    def end(self, session: ClassSession) -> None:
        self.change(session, lambda s: s.end())
        self.sessions.pop(session.code, None)

    def _new_code(self) -> str:
        while True:
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            if code not in self.sessions:
                return code

    def _expire(self) -> None:
        now = time.monotonic()
        for s in list(self.sessions.values()):
            if now - s.touched > self.idle_seconds and not s.followers:
                self.end(s)
