"""Class sessions: a teacher shows, the students' pages follow.

A session is a short code (`/c/CODE`), the teacher (the browser that started it, by its client
cookie), and one state: the view the teacher shows (a page path and its query: every view of
this app lives in its URL), a question with the students' answers, and the runs students sent
in. Every change bumps the session's version and wakes every open event stream; a stream sends
the whole state (what the reader may see of it) with the version as the event id. A student
whose network dropped reconnects with `Last-Event-ID` and gets the current state at once if it
is newer: nothing is replayed, because the newest state is all a follower needs.

Everything here runs on the server's event loop (the routes are `async def`), so the state
needs no lock. Torch-free, and it never sees user code: a view is a path and a query string.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import time
from collections import deque
from dataclasses import dataclass, field

from app.lru import LRU

from .errors import AppError
from .settings import default_of

__all__ = ["ClassError", "ClassSession", "Classroom", "check_view"]

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read aloud and typed on phones
CODE_LENGTH = 6
CODE_PATTERN = re.compile(f"[{CODE_ALPHABET}]{{{CODE_LENGTH}}}")
MAX_QUERY = 2000
MAX_CHOICES = 12
MAX_TEXT = 300
MAX_SUBMISSIONS = 200
MAX_ANSWERS = 1000  # per question: a class, not a poll of the internet
STREAMS_PER_CLIENT = 4  # a student's tabs in one class
MAX_MEMBERS = 2000  # browsers remembered per class (let through a throttled address)
WRONG_CODES_PER_MINUTE = 30  # per address: a person mistypes a few, a script tries thousands
SUBMISSIONS_PER_STUDENT = 5  # runs one student may send to the teacher's list
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
    # one address may stand for at most `people` students (cookies are free: a machine could
    # otherwise be a whole class); votes, streams and runs sent in count per address too
    people: int = 4
    answered_from: dict[str, str] = field(default_factory=dict)  # client -> its address
    address_streams: dict[str, int] = field(default_factory=dict)
    sent_by: dict[str, int] = field(default_factory=dict)  # client or address -> runs sent
    members: set[str] = field(default_factory=set)  # browsers that have opened this class
    audience: int = 0  # changes only the teacher sees: the followers' count, the tally
    ended: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _teacher_changed: asyncio.Event = field(default_factory=asyncio.Event)

    # ---- who is in it --------------------------------------------------------------------------

    def met(self, client: str) -> None:
        if len(self.members) < MAX_MEMBERS:
            self.members.add(client)

    def knows(self, client: str) -> bool:
        return client == self.teacher or client in self.members

    # ---- changes ------------------------------------------------------------------------------

    def _bump(self) -> None:
        """A change every reader sees: every stream wakes."""
        self.version += 1
        self.touched = time.monotonic()
        woken, self._changed = self._changed, asyncio.Event()
        woken.set()
        self._wake_teacher()

    def _bump_teacher(self) -> None:
        """A change only the teacher sees (a count, the tally): the students' streams sleep on,
        so a hundred students joining is not a hundred times a hundred events."""
        self.audience += 1
        self.touched = time.monotonic()
        self._wake_teacher()

    def _wake_teacher(self) -> None:
        woken, self._teacher_changed = self._teacher_changed, asyncio.Event()
        woken.set()

    def mark(self, client: str) -> int:
        """The event id of what `client` sees: students see `version`; the teacher also sees
        the count of followers, so their mark moves with it (both only grow)."""
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
                sum(1 for a in self.answered_from.values() if a == address) >= self.people:
            raise ClassError(429, _per_address(self.people, "answers to this question"))
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

    def submit(self, client: str, run_id: str, name: str, address: str = "") -> None:
        if len(self.submissions) >= MAX_SUBMISSIONS:
            raise ClassError(429, f"this class has {MAX_SUBMISSIONS} runs sent in already")
        if any(s["run"] == run_id for s in self.submissions):
            return
        if self.sent_by.get(client, 0) >= SUBMISSIONS_PER_STUDENT:
            raise ClassError(429, f"you have sent the teacher {SUBMISSIONS_PER_STUDENT} runs "
                                  "already: that is as many as one student may")
        if address and self.sent_by.get("address:" + address, 0) >= \
                SUBMISSIONS_PER_STUDENT * self.people:
            raise ClassError(429, _per_address(self.people, "runs sent to the teacher"))
        self.sent_by[client] = self.sent_by.get(client, 0) + 1
        if address:
            key = "address:" + address
            self.sent_by[key] = self.sent_by.get(key, 0) + 1
        self.submissions.append({"run": run_id, "link": f"/runs/{run_id}", "name": name[:100],
                                 "by": _alias(client),
                                 "at": time.time()})
        self._bump()

    def end(self) -> None:
        self.ended = True
        self._bump()

    def open_stream(self, client: str, following: bool, in_all: int,
                    address: str = "") -> None:
        """Count a reader's event stream in (ClassError 429 past the caps)."""
        if self.streams.get(client, 0) >= STREAMS_PER_CLIENT:
            raise ClassError(429, f"this browser has {STREAMS_PER_CLIENT} pages following this "
                                  "class already: close one")
        if address and self.address_streams.get(address, 0) >= \
                STREAMS_PER_CLIENT * self.people:
            raise ClassError(429, _per_address(self.people, "pages following this class"))
        if sum(self.streams.values()) >= STREAMS_PER_CLASS or in_all >= STREAMS_IN_ALL:
            raise ClassError(429, "this class (or this server) has as many followers as it "
                                  "can serve")
        if address:  # counted only once every cap has let it in: close_stream undoes it
            self.address_streams[address] = self.address_streams.get(address, 0) + 1
        self.streams[client] = self.streams.get(client, 0) + 1
        if following:
            self._follow(client, +1)

    def close_stream(self, client: str, following: bool, address: str = "") -> None:
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
            self._bump_teacher()

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
        if teacher:
            out["followers"] = len(self.followers)
            out["submissions"] = list(self.submissions)
        return out

    async def changed(self, client: str, after: int, timeout: float) -> bool:
        """Wait until `client`'s mark is past `after` (True) or `timeout` passes (False)."""
        teacher = client == self.teacher
        while self.mark(client) <= after and not self.ended:
            event = self._teacher_changed if teacher else self._changed
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except TimeoutError:
                return False
        return True


def _per_address(people: int, what: str) -> str:
    return (f"one network address may stand for at most {people} people here, and it has as "
            f"many {what} as that; if your class shares one network address, ask the teacher "
            "to start the server with AUTOGRAD_LAB_PER_ADDRESS_PEOPLE set to the class's size")


def _alias(client: str) -> str:
    """A short stable name for a student (their cookie is a secret: never show it)."""
    return "student-" + hashlib.sha256(client.encode()).hexdigest()[:6]


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

    def get(self, code: str, address: str = "", client: str = "") -> ClassSession:
        """The class with this code. Wrong codes are counted per address: past
        WRONG_CODES_PER_MINUTE in a minute, the address is refused (429) until the minute has
        passed, so codes cannot be tried by the thousand; a browser already in that class
        (`client`) is let through, so a room behind one address is not locked out by one
        guesser among it."""
        code = code.upper()
        session = self.sessions.get(code) if CODE_PATTERN.fullmatch(code) else None
        misses = self._wrong_codes.get(address) if address else None
        now = time.monotonic()
        if misses is not None:
            while misses and now - misses[0] > 60:
                misses.popleft()
            member = session is not None and client and session.knows(client)
            if len(misses) >= WRONG_CODES_PER_MINUTE and not member:
                raise ClassError(429, f"{WRONG_CODES_PER_MINUTE} wrong class codes came from "
                                      "this address in a minute: wait a minute, then check the "
                                      "code with the teacher", "too_many_codes",
                                 headers={"Retry-After": "60"})
        if session is None:
            if address:
                if misses is None:
                    misses = deque()
                    self._wrong_codes.put(address, misses)
                misses.append(now)
            raise ClassError(404, f"there is no class {code[:12]!r} here: check the code, or "
                                  "ask the teacher for the link", "no_class")
        if client:
            session.met(client)
        return session

    def teaching(self, code: str, client: str, address: str = "") -> ClassSession:
        session = self.get(code, address, client)
        if session.teacher != client:
            raise ClassError(403, "only the teacher who started this class can do that",
                             "not_the_teacher")
        if session.ended:
            raise ClassError(409, "this class has ended", "class_ended")
        return session

    def end(self, session: ClassSession) -> None:
        session.end()
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
