"""A class session in two real Chromium contexts, a teacher and students, against a real
server: the students follow what the teacher shows, may stop following and come back, catch up
by themselves after their network drops, and predict before the gradient views are revealed.

Students reach the server through tests/proxy.py's relay, so a test can cut their network
without touching the teacher's."""

from __future__ import annotations

import json
import re
from urllib.parse import urlparse

import httpx
import pytest

from tests.proxy import Relay
from tests.server import serve

from .conftest import Watched, api_trace, box, inside, screen, settled

pytestmark = pytest.mark.browser


PHONE = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2}


@pytest.fixture
def room(browser, server, request):
    """(teacher, relay, new_student): the teacher's page, the students' relay, and a function
    that opens another student's browser on it."""
    name = request.node.name.replace("test_", "", 1)
    contexts, watched = [], []

    def page(base: str, who: str, viewport=(1400, 900), **device) -> Watched:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                      **device)
        contexts.append(context)
        p = context.new_page()
        p.set_default_timeout(60_000)
        w = Watched(p, base, f"{name}-{who}")
        watched.append(w)
        return w

    with Relay(urlparse(server).port) as relay:
        student_base = f"http://127.0.0.1:{relay.port}"
        count = iter(range(1, 100))
        # new_student(phone=True): a 390 x 844 phone (touch, mobile layout)
        yield page(server, "teacher"), relay, lambda phone=False: page(
            student_base, f"student{next(count)}", *(((390, 844),) if phone else ((1000, 900),)),
            **(PHONE if phone else {}))
    for context in contexts:
        context.close()
    for w in watched:
        assert not w.foreign, f"requests to other hosts: {w.foreign}"
        # a cut network makes the student's reconnecting stream log an error: that is the test
        errors = [e for e in w.errors if "events" not in e and "ERR_" not in e]
        assert not errors, f"console errors: {errors}"


def start_class(teacher: Watched, scenario: str) -> str:
    page = teacher.page
    page.goto(f"{teacher.base}/scenarios/{scenario}")
    page.wait_for_selector("#graph svg g.node")
    page.click("#class-start")
    page.wait_for_selector(".class-link")
    link = page.text_content(".class-link")
    code = re.fullmatch(r"http://[^/]+/c/([A-Z0-9]{6})", link).group(1)
    return code


def give_name(student: Watched, name: str | None = None) -> None:
    """Type the name the teacher will see in the class bar's join form, and join."""
    student.page.fill("#class-name", name or student.test_name.rsplit("-", 1)[-1])
    student.page.click("#class-join-button")


def join(student: Watched, code: str, scenario: str, name: str | None = None) -> None:
    student.page.goto(f"{student.base}/c/{code}")
    give_name(student, name)
    student.page.wait_for_url(re.compile(rf".*/scenarios/{scenario}(\?.*)?$"))
    student.page.wait_for_selector("#graph svg g.node")


def followers(teacher: Watched, n: int) -> None:
    teacher.page.wait_for_function("() => (document.querySelector('#class-followers') || {})"
                                   f".textContent === ' · {n} following'")


def selected(w: Watched) -> str | None:
    return w.page.evaluate("() => { const g = document.querySelector("
                           "'#graph svg g.node.is-selected'); return g ? g.id : null; }")


def wait_selected(w: Watched, node_id: str) -> None:
    w.page.wait_for_function(
        f"() => {{ const g = document.querySelector('#graph svg g.node.is-selected');"
        f" return g && g.id === '{node_id}'; }}")


def test_students_follow_the_teacher_and_catch_up_after_the_network_drops(room):
    teacher, relay, new_student = room
    student, code = class_of_one(teacher, new_student, "reused_layer")

    # a scenario change: the student's page opens the next scenario
    teacher.page.click("nav.neighbours >> text=next →")
    teacher.page.wait_for_url(re.compile(r".*/scenarios/stop_gradient(\?.*)?$"))
    student.page.wait_for_url(re.compile(r".*/scenarios/stop_gradient(\?.*)?$"))
    student.page.wait_for_selector("#graph svg g.node")

    # a variant change: same page, redrawn in place
    student.page.evaluate("() => { window.sameDocument = true; }")
    teacher.page.click("label.variant-choice:has(input[value=detach])")
    student.page.wait_for_url(re.compile(r".*variant=detach.*"))
    student.page.wait_for_selector("label.variant-choice input[value=detach]:checked",
                                   state="attached")
    assert student.page.evaluate("() => window.sameDocument === true")  # no reload

    # a node selection
    teacher.page.wait_for_selector("#progress", state="hidden")
    student.page.wait_for_selector("#progress", state="hidden")
    teacher.page.click("#graph svg g.node >> nth=1")
    picked = selected(teacher)
    wait_selected(student, picked)
    student.shot("following")

    # a presenter step: the student's page shows the same paragraph, and what it points at
    teacher.page.click("#present-toggle")  # (the keyboard's focus is on a variant button)
    teacher.page.keyboard.press("ArrowRight")
    student.page.wait_for_url(re.compile(r".*present=1.*say=2.*"))
    student.page.wait_for_selector("#presenter", state="visible")
    student.page.wait_for_function(
        "() => document.querySelector('.presenter-where').textContent.startsWith('Step 2 of')")
    assert student.page.text_content(".presenter-text") == teacher.page.text_content(
        ".presenter-text")
    # the step's Show: line is selected on both (stop_gradient's answer points at a line)
    student.page.wait_for_selector("#source li.line-selected", state="attached")
    assert student.page.text_content("#source li.line-selected") == teacher.page.text_content(
        "#source li.line-selected")
    student.shot("presenter")
    teacher.page.keyboard.press("Escape")
    student.page.wait_for_selector("#presenter", state="hidden")
    picked = selected(teacher)

    # stop following: the teacher's next pick does not move the student, who is not counted
    student.page.click("#class-unfollow")
    followers(teacher, 0)
    teacher.page.click("#graph svg g.node >> nth=2")
    second = selected(teacher)
    assert second != picked
    student.page.wait_for_timeout(1500)
    assert selected(student) == picked
    # follow again: the student jumps to what the teacher shows now
    student.page.click("#class-follow")
    wait_selected(student, second)
    followers(teacher, 1)

    # the student's network drops while the teacher moves on; it comes back, the page catches up
    relay.cut()
    teacher.page.click("#graph svg g.node >> nth=3")
    third = selected(teacher)
    student.page.wait_for_timeout(1500)
    assert selected(student) == second
    before = relay.connections
    relay.restore()
    wait_selected(student, third)
    assert relay.connections > before  # it came back through the network, by itself
    assert student.page.evaluate("() => window.sameDocument === true")  # no reload
    teacher.shot("teacher")


def test_predict_then_reveal(room, server):
    teacher, _relay, new_student = room
    code = start_class(teacher, "reused_layer")
    students = [new_student(), new_student()]
    for s in students:
        join(s, code, "reused_layer")
    followers(teacher, 2)
    # ask how often the busiest parameter is used: the Trace's own count is the answer
    teacher.page.click("[data-ask=uses]")
    trace = api_trace(teacher, "reused_layer")
    ev = next(e for e in trace["events"] if e["kind"] == "backward")
    uses = max(len(c) for c in ev["contributions"].values())
    assert uses == 3  # k = 3: the middle layer is used three times
    for s in students:
        s.page.wait_for_selector(".class-question button")
        # the gradient views are hidden until the reveal
        assert s.page.locator(".col-panel").is_hidden()
        assert "class-predicting" in s.page.evaluate("() => document.body.className")
    students[0].page.click(f".class-question button[data-choice='{uses}']")  # right
    students[1].page.click(".class-question button[data-choice='1']")  # wrong
    students[1].page.wait_for_selector(".class-choices li.is-mine >> text=your answer")
    students[1].shot("picked", full_page=False)
    teacher.page.wait_for_function(
        "() => document.querySelector('.class-question > p:last-child').textContent"
        ".startsWith('2 answered')")
    tally = teacher.page.eval_on_selector_all(".tally-count", "els => els.map(e => +e.textContent)")
    assert tally[uses] == 1 and tally[1] == 1 and sum(tally) == 2
    # the teacher's screen may be the projector: no answer marked before the reveal
    assert teacher.page.locator(".tally-row.is-answer").count() == 0
    teacher.shot("tally")
    teacher.page.click("#class-reveal")
    teacher.page.wait_for_selector(".tally-row.is-answer")
    assert "is-answer" in teacher.page.get_attribute(f".tally-row[data-choice='{uses}']", "class")
    for s in students:
        s.page.wait_for_selector(".col-panel", state="visible")
        s.page.wait_for_selector(".class-choices li.is-answer")
        assert s.page.text_content(".class-choices li.is-answer .choice-text") == str(uses)
    # choices are lettered, not numbered beside numeric answers; the student's own pick is
    # said in words after the reveal, right or wrong
    letters = students[0].page.eval_on_selector_all(".class-choices .choice-letter",
                                                   "els => els.map(e => e.textContent)")
    assert letters == list("ABCDEFGHIJKL"[:len(letters)])
    assert students[0].page.evaluate(
        "() => getComputedStyle(document.querySelector('.class-choices')).listStyleType") == "none"
    right = students[0].page.locator(".class-choices li.is-mine")
    assert right.get_attribute("data-choice") == str(uses) and "is-answer" in right.get_attribute(
        "class")
    assert "your answer" in right.text_content()
    assert "right ✔" in students[0].page.text_content(".class-verdict")
    wrong = students[1].page.locator(".class-choices li.is-mine")
    assert wrong.get_attribute("data-choice") == "1" and "your answer ✗" in wrong.text_content()
    assert "the answer: " + "ABCD"[uses] in students[1].page.text_content(".class-verdict")
    teacher.shot("revealed")
    students[0].shot("revealed")
    students[1].shot("revealed")
    # the teacher moves on (a replay step: the view changes in place): the students' revealed
    # question folds away; a click opens it again
    teacher.page.click("#replay-next")
    for s in students:
        s.page.wait_for_function(
            "() => !document.querySelector('details.class-question.is-revealed').open")
        assert s.page.locator(".class-choices").is_hidden()
    students[1].shot("folded", full_page=False)
    students[1].page.click("details.class-question.is-revealed > summary")
    assert students[1].page.locator(".class-choices").is_visible()
    # the server agrees: a program reading the class sees the same tally
    state = httpx.get(f"{server}/api/classes/{code}", timeout=10).json()
    assert state["role"] == "student" and state["question"]["tally"] == tally


def test_the_teacher_sees_a_member_join_and_removes_it(room):
    teacher, _relay, new_student = room
    code = start_class(teacher, "reused_layer")
    teacher.page.click(".class-members summary")
    teacher.page.wait_for_selector(".class-members >> text=Nobody has joined yet")
    student = new_student()
    join(student, code, "reused_layer")
    # the member appears by itself (the teacher's stream says the class changed)
    member = teacher.page.locator(".class-member").first  # drawn anew on every class event
    member.wait_for()
    alias = member.get_attribute("data-alias")
    assert re.fullmatch(r"student-[0-9a-f]{6,}", alias)
    # listed by the name it chose (the alias beside it, the handle the teacher removes by)
    teacher.page.wait_for_selector(
        f".class-member[data-alias='{alias}'] .class-name:text-is('student1')")
    assert teacher.page.text_content(".class-members summary") == "Members (1)"
    assert teacher.page.text_content(".class-group") == "address 1 (your address too) · 1 member"
    assert "127.0.0" not in teacher.page.text_content(".class-members")
    # four more browsers behind the same address: the last is turned away, and the teacher
    # is told; the switch lets it in
    others = [httpx.Client(base_url=teacher.base, timeout=10) for _ in range(4)]
    try:
        for other in others:
            other.get("/")  # its cookie
        assert [o.get(f"/api/classes/{code}").status_code for o in others] == [200] * 3 + [429]
        teacher.page.wait_for_selector(".class-turned")
        teacher.page.wait_for_function(
            "() => document.querySelectorAll('.class-member').length === 4")
        assert teacher.page.text_content(".class-members summary") == \
            "Members (4) · 1 turned away: their network address is full"
        teacher.shot("turned-away")
        # (the box is ticked at once; the server has it when its PATCH is answered)
        with teacher.page.expect_response(lambda r: r.request.method == "PATCH") as switched:
            teacher.page.check("#class-shared")
        assert switched.value.ok
        assert others[3].get(f"/api/classes/{code}").status_code == 200
    finally:
        for other in others:
            other.close()
    teacher.page.wait_for_function("() => document.querySelectorAll('.class-member').length === 5")
    assert teacher.page.text_content(".class-members summary") == "Members (5)"
    teacher.shot("members")
    # remove the student: it leaves the list, and its page is told
    teacher.page.once("dialog", lambda dialog: dialog.accept())
    teacher.page.click(f".class-member[data-alias='{alias}'] .class-remove")
    teacher.page.wait_for_selector(f".class-member[data-alias='{alias}']", state="detached")
    # the count in the summary comes with the class's next state, a moment after the list:
    # waited for (a busy machine showed the list first, "Members (5)" still above it)
    teacher.page.wait_for_function(
        "() => document.querySelector('.class-members summary').textContent === 'Members (4)'")
    student.page.wait_for_selector(
        ".class-message >> text=The teacher removed this browser from the class.")
    student.shot("removed")
    teacher.shot("removed")


def test_a_student_turned_away_for_their_address_joins_once_the_teacher_says_so(room):
    """Four browsers behind the address are in: the fifth (a real page) is told why it is not,
    and joins by itself once the teacher switches on "This room shares one network address"."""
    teacher, _relay, new_student = room
    code = start_class(teacher, "reused_layer")
    others = [httpx.Client(base_url=teacher.base, timeout=10) for _ in range(4)]
    try:
        for other in others:
            other.get("/")  # its cookie
            assert other.get(f"/api/classes/{code}").status_code == 200
        student = new_student()
        student.page.goto(f"{student.base}/c/{code}")
        student.page.wait_for_selector(".class-message >> text=Not in the class yet")
        assert "ask the teacher to switch on “This room shares one network address”" in \
            student.page.text_content(".class-message")
        student.shot("turned-away")
        teacher.page.click(".class-members summary")
        teacher.page.check("#class-shared")
        student.page.wait_for_selector("#class-name")  # in: it chooses its name, then follows
        give_name(student)
        student.page.wait_for_url(re.compile(r".*/scenarios/reused_layer(\?.*)?$"))
        teacher.page.wait_for_function(
            "() => document.querySelectorAll('.class-member').length === 5")
    finally:
        for other in others:
            other.close()
    # the refusals the page met before (429) are the test, not a fault of the page
    student.errors[:] = [e for e in student.errors if "status of 429" not in e]


# ---- a class on a server with a token ---------------------------------------------------------

TOKEN = "s3cret"
MINE = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
# what a stranger might type as a name: markup, a right-to-left override, a control character
HOSTILE = "<img src=x onerror=alert(1)>\u202eBob\u0007"


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="browser/class-token-server",
               TOKEN=TOKEN, TRACE_TIMEOUT="120", WARM_SCENARIOS="false", SELFTEST="false",
               LOOPBACK_MEMBERS_UNSANDBOXED="true") as base:  # members run code, self-test off
        yield base


@pytest.fixture
def token_room(browser, token_server, request):
    """new_page(who) -> a page of a browser of its own on the token server."""
    name = request.node.name.replace("test_", "", 1)
    contexts, watched = [], []

    def page(who: str, viewport=(1400, 900)) -> Watched:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        p = context.new_page()
        p.set_default_timeout(60_000)
        w = Watched(p, token_server, f"{name}-{who}")
        watched.append(w)
        return w

    yield page
    for context in contexts:
        context.close()
    for w in watched:
        assert not w.foreign, f"requests to other hosts: {w.foreign}"
        assert not w.errors, f"console errors: {w.errors}"


def _can_run(w: Watched) -> int:
    """POST /api/runs from this browser (its cookie), without the token: the status."""
    return w.page.request.post(f"{w.base}/api/runs", data={"source": " "},
                               fail_on_status_code=False).status


def test_a_student_runs_code_without_the_token_and_sends_only_their_own_runs(token_room):
    teacher, ana, bob, stranger = (token_room(who) for who in ("teacher", "ana", "bob",
                                                                  "stranger"))
    teacher.page.goto(f"{teacher.base}/scenarios/reused_layer")
    teacher.page.wait_for_selector("#graph svg g.node")
    teacher.page.once("dialog", lambda dialog: dialog.accept(TOKEN))  # the token, asked once
    teacher.page.click("#class-start")
    teacher.page.wait_for_selector(".class-link")
    code = re.search(r"/c/([A-Z0-9]{6})$", teacher.page.text_content(".class-link")).group(1)
    # (the page tried without the token first: Chromium logs that 401)
    teacher.errors[:] = [e for e in teacher.errors if "status of 401" not in e]

    # Ana joins: the bar asks for her name first, then her page follows the teacher
    ana.page.goto(f"{ana.base}/c/{code}")
    ana.page.wait_for_selector("#class-name")
    assert ana.page.locator("#graph").count() == 0  # not followed anywhere before the name
    ana.page.fill("#class-name", "Ana")
    ana.shot("join", full_page=False)
    ana.page.click("#class-join-button")
    ana.page.wait_for_url(re.compile(r".*/scenarios/reused_layer(\?.*)?$"))
    assert ana.page.text_content("#class-my-name") == "Ana"
    # Bob types markup and a right-to-left override: an empty name is refused, this one is
    # taken as text
    bob.page.goto(f"{bob.base}/c/{code}")
    bob.page.fill("#class-name", " \u200b ")
    bob.page.click("#class-join-button")
    bob.page.wait_for_selector("#class-name-problem")
    assert "type a name" in bob.page.text_content("#class-name-problem")
    bob.errors[:] = [e for e in bob.errors if "status of 422" not in e]  # that refusal
    bob.page.fill("#class-name", HOSTILE)
    bob.page.click("#class-join-button")
    bob.page.wait_for_url(re.compile(r".*/scenarios/reused_layer(\?.*)?$"))
    assert bob.page.text_content("#class-my-name") == "<img src=x onerror=alert(1)>Bob"

    # Ana's own code: no token field, a word on why; the run takes no token
    ana.page.goto(f"{ana.base}/own-code")
    assert ana.page.locator("#token").count() == 0
    assert code in ana.page.text_content("#class-grant")
    ana.shot("own-code", full_page=False)
    ana.page.fill("#source", MINE)
    ana.page.fill("#name", "mine.py")
    ana.page.click("#run")
    ana.page.wait_for_url(re.compile(r".*/runs/[A-Za-z0-9_-]+$"))
    run_path = urlparse(ana.page.url).path
    ana.page.wait_for_selector("#graph svg g.node")
    # a locator, not an element: the class bar is drawn anew on every class event, and a
    # handle taken before one points at a button no longer on the page
    send = ana.page.locator("#class-send-run")
    send.wait_for()
    assert send.text_content() == "Send this run to the teacher"
    # her own run is hers: "Your code", and the way to edit it
    assert ana.page.text_content("#run-title") == "Your code: mine.py"
    assert ana.page.locator("#run-edit").is_visible()
    ana.shot("own-run", full_page=False)
    send.click()
    ana.page.wait_for_selector("#class-send-run:disabled >> text=Sent to the teacher ✓")

    # the teacher sees her name in the runs sent in, and both names among the members
    teacher.page.wait_for_selector(".class-runs li")
    assert teacher.page.text_content(".class-runs li") == "mine.py by Ana"
    teacher.page.click(".class-members summary")
    teacher.page.wait_for_function("() => document.querySelectorAll('.class-member').length === 2")
    names = teacher.page.eval_on_selector_all(".class-member .class-name",
                                              "els => els.map(e => e.textContent)")
    assert sorted(names) == sorted(["Ana", "<img src=x onerror=alert(1)>Bob"])
    assert teacher.page.locator("#class-bar img").count() == 0  # text, never markup
    teacher.shot("names", full_page=False)

    # the teacher opens Ana's run for the class: Bob, following, is shown it, with no "Send"
    with bob.page.expect_response(lambda r: f"/api/classes/{code}/runs/" in r.url) as checked:
        teacher.page.click(".class-runs li a")
        bob.page.wait_for_url(re.compile(rf".*{run_path}(\?.*)?$"))
    assert checked.value.json()["yours"] is False
    bob.page.wait_for_selector("#graph svg g.node")
    assert bob.page.locator("#class-send-run").count() == 0
    # titled as Ana's, not "Your code", and without "edit and run again"
    bob.page.wait_for_function("() => document.querySelector('#run-title').textContent"
                               " === \"Ana's code: mine.py\"")
    assert bob.page.locator("#run-title bdi").text_content() == "Ana"
    assert bob.page.locator("#run-edit").is_hidden()
    assert bob.page.get_by_text("edit and run again").count() == 0 or \
        bob.page.get_by_text("edit and run again").is_hidden()
    assert bob.page.title().startswith("Ana's code: mine.py")
    # the projector says whose it is too
    teacher.page.wait_for_function("() => document.querySelector('#run-title').textContent"
                                   " === \"Ana's code: mine.py\"")
    assert teacher.page.locator("#run-edit").is_hidden()
    bob.shot("not-his-run", full_page=False)

    # a stranger (in no class) still needs the token
    stranger.page.goto(f"{stranger.base}/own-code")
    assert stranger.page.locator("#token").count() == 1
    assert _can_run(stranger) == 401
    assert _can_run(ana) == 422  # (an empty script: let in, refused for being empty)

    # the teacher removes Ana: she loses the right at once, Bob keeps it
    teacher.page.click(".class-members summary")  # (a new page: the panel starts closed)
    teacher.page.wait_for_function("() => document.querySelectorAll('.class-member').length === 2")
    alias = teacher.page.evaluate("() => [...document.querySelectorAll('.class-member')].find("
                                  "li => li.querySelector('.class-name').textContent === 'Ana')"
                                  ".dataset.alias")
    teacher.page.once("dialog", lambda dialog: dialog.accept())
    teacher.page.click(f".class-member[data-alias='{alias}'] .class-remove")
    teacher.page.wait_for_selector(f".class-member[data-alias='{alias}']", state="detached")
    assert _can_run(ana) == 401
    assert _can_run(bob) == 422
    ana.page.goto(f"{ana.base}/own-code")
    assert ana.page.locator("#token").count() == 1 and ana.page.locator("#class-grant").count() == 0
    # the class ends: Bob's right with it
    before_end = {id(w): len(w.errors) for w in (teacher, ana, bob, stranger)}
    teacher.page.click("#class-end")
    teacher.page.wait_for_selector(".class-message >> text=The class has ended.")
    assert _can_run(bob) == 401
    bob.page.wait_for_selector(".class-message")  # his page heard it too: no more class calls
    # A page's class call already on its way when the class ended (the members list, a
    # recheck of the stream) is answered 404, which the page reads as "ended"; Chromium logs
    # it as a console error all the same. Only those are let go, and only after the end.
    for w in (teacher, ana, bob, stranger):
        kept = w.errors[:before_end[id(w)]]
        kept += [e for e in w.errors[before_end[id(w)]:]
                 if not ("status of 404" in e and f"/api/classes/{code}" in e)]
        w.errors[:] = kept


# ---- the class band on a projector (issue 35) ---------------------------------------------------

PROJECTORS = [(1920, 1080), (1280, 720)]


def page_fits(page) -> dict:
    return page.evaluate("() => ({scroll: document.documentElement.scrollHeight,"
                         " inner: window.innerHeight})")


def class_of_one(teacher, new_student, scenario: str):
    """(student, class code): a class started on `scenario`, one student joined and counted
    among the teacher's followers."""
    code = start_class(teacher, scenario)
    student = new_student()
    join(student, code, scenario)
    followers(teacher, 1)
    return student, code


def presenting(room, size: tuple[int, int] | None = None):
    """(teacher, student, class code): reused_layer's class started, one student following,
    the teacher's page in presenter mode at its first step (at `size` if given)."""
    teacher, _relay, new_student = room
    if size:
        teacher.page.set_viewport_size({"width": size[0], "height": size[1]})
    student, code = class_of_one(teacher, new_student, "reused_layer")
    teacher.page.click("#present-toggle")
    teacher.page.wait_for_selector("#presenter", state="visible")
    return teacher, student, code


@pytest.mark.parametrize("size", PROJECTORS, ids=["1920x1080", "1280x720"])
def test_the_class_band_never_pushes_the_graph_off_the_projector(room, size):
    """The scenario's question asked at presenter step 3 (the one that shows the parameter's
    bars): the question and its tally take the class band, whose height does not change, and
    the graph and the bars stay on the screen; the next step puts the question away on the
    teacher's and the student's pages."""
    teacher, student, code = presenting(room, size)
    page = teacher.page
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=3')")
    page.wait_for_selector(".col-panel .waterfall")
    settled(page)
    first = screen(page)
    band = box(page, "#class-bar")
    page.click("[data-ask=scenario]")
    page.wait_for_selector(".class-question .tally-row")
    student.page.wait_for_selector(".class-question button")
    student.page.click(".class-question button[data-choice='1']")
    page.wait_for_function("() => document.querySelector('.class-question')"
                           ".textContent.includes('1 answered')")
    page.wait_for_timeout(300)  # the graph's refit (a resize of the band) has come and gone
    settled(page)
    asked = box(page, "#class-bar")
    fits = page_fits(page)
    graph = box(page, "#graph")
    total = box(page, "#details .acc-bar.total")
    print(f"\n{size}: band {band['height']:.0f} -> {asked['height']:.0f} px, page {fits},"
          f" graph {graph['y']:.0f}-{graph['bottom']:.0f}, .grad bar bottom {total['bottom']:.0f},"
          f" tally row bottom {box(page, '.tally-row')['bottom']:.0f}")
    teacher.shot(f"asked-{size[1]}", full_page=False)
    assert asked["height"] == pytest.approx(band["height"], abs=1), "the band grew"
    assert fits["scroll"] <= fits["inner"] + 1, f"the page overflows the screen: {fits}"
    assert inside(graph, first), f"the graph runs past the screen: {graph}"
    assert inside(total, first), f"the .grad bar is off screen: {total}"
    assert inside(box(page, "#details .waterfall"), first), "the bars are off screen"
    # the question and every choice's tally are in the band, on the screen
    for i in range(4):
        row = box(page, f".tally-row[data-choice='{i}']")
        assert inside(row, asked) and inside(row, first), f"choice {i} is cut: {row}"
    # the teacher moves on to the next step: the question leaves both pages
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => location.search.includes('say=2')")
    page.wait_for_selector(".class-question", state="detached")
    student.page.wait_for_selector(".class-question", state="detached")
    settled(page)
    assert box(page, "#class-bar")["height"] == pytest.approx(band["height"], abs=1)
    assert inside(box(page, "#graph"), first)
    teacher.shot(f"moved-on-{size[1]}", full_page=False)


def test_a_question_asked_right_after_a_step_belongs_to_that_step(room):
    """The server is slow to hear the step (its view PUT held back here, as a busy server
    answers late): the question asked just after it still belongs to the new step, so it stays
    until the teacher steps again (it was taken as asked at the previous step, and the step's
    late arrival put it away; or, stepping back, it stayed: the proof's flake)."""
    teacher, student, code = presenting(room)
    page = teacher.page
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=2')")
    held: list = []
    page.route(f"**/api/classes/{code}/view", lambda route: held.append(route))
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=3')")
    page.wait_for_timeout(300)  # past the page's 40 ms wait: the step's PUT is on its way
    assert held, "the step was not sent"
    asked = []
    page.on("request", lambda r: r.method == "POST" and r.url.endswith("/question")
            and asked.append(r.url))
    page.click("[data-ask=scenario]")
    page.wait_for_timeout(500)
    assert not asked, "the question went before the step it is about"
    for route in held:
        route.continue_()
    page.unroute(f"**/api/classes/{code}/view")
    page.wait_for_selector(".class-question .tally-row")
    student.page.wait_for_selector(".class-question button")
    page.wait_for_timeout(500)  # the step has landed: the question is still there
    assert page.locator(".class-question").count() == 1
    page.keyboard.press("ArrowLeft")  # the teacher steps back: the question goes
    page.wait_for_function("() => location.search.includes('say=2')")
    page.wait_for_selector(".class-question", state="detached", timeout=15_000)
    student.page.wait_for_selector(".class-question", state="detached", timeout=15_000)


# ---- a phone following (issue 35) -------------------------------------------------------------

FAILS = """\
import torch

w = torch.randn(3, requires_grad=True)
h = w.sigmoid()
h.mul_(2)
h.sum().backward()
"""


def visible_graph(page) -> dict:
    """The part of the graph a phone's reader sees: within the window, above the details sheet
    when one is open."""
    graph, window = box(page, "#graph"), screen(page)
    bottom = min(graph["bottom"], window["bottom"])
    if page.evaluate("() => document.body.classList.contains('sheet-open')"):
        bottom = min(bottom, box(page, "#details")["y"])
    top = max(graph["y"], 0)
    return {"x": graph["x"], "y": top, "right": graph["right"], "bottom": bottom,
            "width": graph["width"], "height": bottom - top}


def test_a_phone_following_sees_the_picked_node_and_the_explanation(room):
    """A student on a 390 x 844 phone follows: each node the teacher picks is brought into the
    part of the graph the phone shows (in the window, above the details sheet); a failed run
    the teacher opens keeps its explanation and fix uncovered by the sheet."""
    teacher, _relay, new_student = room
    code = start_class(teacher, "reused_layer")
    student = new_student(phone=True)
    join(student, code, "reused_layer")
    followers(teacher, 1)
    page = student.page
    page.wait_for_selector("#progress", state="hidden")
    teacher.page.wait_for_selector("#progress", state="hidden")
    settled(page)
    # the nodes the phone's opening view leaves out of sight: the teacher picks each of three
    out = page.evaluate("""() => {
      const g = document.querySelector('#graph').getBoundingClientRect();
      return [...document.querySelectorAll('#graph svg g.node')].filter(n => {
        const b = n.getBoundingClientRect();
        return b.top < g.top || b.bottom > Math.min(g.bottom, innerHeight) || b.left < g.left ||
          b.right > g.right; }).map(n => n.id); }""")
    assert len(out) >= 3, f"the phone opens with {out} out of sight: pick others"
    for node in (out[0], out[len(out) // 2], out[-1]):
        teacher.page.locator(f"#graph svg g.node#{node}").dispatch_event("click")
        wait_selected(student, node)
        page.wait_for_timeout(400)  # the sheet's opening and the pan (two frames) are done
        settled(page)
        seen = visible_graph(page)
        drawn = box(page, f"#graph svg g.node#{node}")
        print(f"\n{node}: node {drawn['y']:.0f}-{drawn['bottom']:.0f}, seen graph"
              f" {seen['y']:.0f}-{seen['bottom']:.0f}")
        assert inside(drawn, screen(page)), f"{node} is off the phone's screen: {drawn}"
        assert inside(drawn, seen), f"{node} is not in the part of the graph seen: {drawn}"
    student.shot("picked", full_page=False)
    # a failed run, opened by the teacher: its explanation and fix are not under the sheet
    run = httpx.post(f"{teacher.base}/api/runs", json={"source": FAILS}, timeout=120).json()
    teacher.page.goto(teacher.base + run["run"]["link"])
    teacher.page.wait_for_selector("#status .explanation")
    page.wait_for_url(re.compile(rf".*{run['run']['link']}(\?.*)?$"))
    page.wait_for_selector("#status .explanation-fix")
    page.wait_for_timeout(600)
    settled(page)
    explanation = box(page, "#status .explanation")
    fix = box(page, "#status .explanation-fix")
    print(f"explanation {explanation['y']:.0f}-{explanation['bottom']:.0f}, fix"
          f" {fix['y']:.0f}-{fix['bottom']:.0f}")
    student.shot("failed-run", full_page=False)
    assert inside(fix, screen(page)), f"the fix is off the phone's screen: {fix}"
    if page.evaluate("() => document.body.classList.contains('sheet-open')"):
        sheet = box(page, "#details")
        assert fix["bottom"] <= sheet["y"] + 1, f"the sheet ({sheet['y']:.0f}) covers the fix"


def first_step_held(room):
    """A presenter and a student, the teacher's first step (to say=2) taken with its view PUT
    held back, as a slow server's answer is: (teacher, student, the held PUT's route, the query
    of every PUT sent). Any later PUT goes straight through."""
    teacher, student, code = presenting(room)
    page = teacher.page
    held: list = []
    sent: list[str] = []

    def first_held(route) -> None:
        sent.append(json.loads(route.request.post_data or "{}").get("query", ""))
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(f"**/api/classes/{code}/view", first_held)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=2')")
    page.wait_for_timeout(300)  # past the page's 40 ms wait: the step's PUT is on its way
    assert len(held) == 1, "the step was not sent"
    return teacher, student, held, sent


def test_two_quick_steps_leave_the_class_on_the_later_one(room):
    """A busy server can take two view PUTs in flight at once in either order: the first step's
    held back here, as a slow answer is, the second must not overtake it. On the old page it
    did, and the held one, arriving last, put the class back on the earlier step (the
    students' pages went back to it: the proof's flake, 'say=2' never reached)."""
    teacher, student, held, _sent = first_step_held(room)
    page = teacher.page
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('say=3')")
    page.wait_for_timeout(500)
    held[0].continue_()  # the earlier step's PUT reaches the server last
    student.page.wait_for_url(re.compile(r".*present=1.*say=3\b.*"))
    student.page.wait_for_timeout(1500)  # and stays there
    assert re.search(r"say=3\b", student.page.url), student.page.url


def test_steps_taken_while_the_server_is_slow_send_one_view_after_it(room):
    """While a view PUT is unanswered, steps wait to send the view shown once it is: one PUT
    waits, not one per step (each of which sent the same view). The first PUT held back, three
    quick steps (to say=3, back to 2, to 3 again) send one more, with the last view."""
    teacher, student, held, sent = first_step_held(room)
    page = teacher.page
    for key, say in (("ArrowRight", 3), ("ArrowLeft", 2), ("ArrowRight", 3)):
        page.keyboard.press(key)
        page.wait_for_function(f"() => new URLSearchParams(location.search).get('say') === "
                               f"'{say}'")
        page.wait_for_timeout(200)  # past the 40 ms wait: each step would have queued a PUT
    held[0].continue_()
    student.page.wait_for_url(re.compile(r".*present=1.*say=3\b.*"))
    page.wait_for_timeout(1500)  # any PUT still queued has gone by now
    assert len(sent) == 2, sent
    assert re.search(r"say=2\b", sent[0]) and re.search(r"say=3\b", sent[1]), sent
    assert re.search(r"say=3\b", student.page.url), student.page.url
