"""A class on a server with a token (issue 21), against a real server: a student joins with a
name and runs code without the token; the teacher sees the name where runs sent in are listed
and in the Members panel; only the student's own runs can be sent; a removed member, a stranger
and a member of an ended class run no code without the token. Hostile names are cleaned and
capped, never a 500, and reach the event stream as JSON strings."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

TOKEN = "s3cret"
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
HOSTILE = "<script>alert('x')</script>\u202e\u0000\x1b" + "é" * 500 + "x" * 9_500  # 10 kB


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="class-members-server", TOKEN=TOKEN,
               MAX_DRAWINGS="1", UPLOAD_WORKERS="1", POOL_SIZE="0", WARM_SCENARIOS="false",
               SELFTEST="false") as url:
        yield url


@pytest.fixture
def browsers(base):
    made: list[httpx.Client] = []

    def make() -> httpx.Client:
        client = httpx.Client(base_url=base, timeout=120)
        assert client.get("/").status_code == 200 and client.cookies  # its session cookie
        made.append(client)
        return client

    yield make
    for b in made:
        b.close()


def _run(browser: httpx.Client, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return browser.post("/api/runs", json={"source": SMALL, "name": "mine.py"}, headers=headers)


def test_a_student_joins_with_a_name_and_runs_code_without_the_token(browsers):
    teacher = browsers()
    assert teacher.post("/api/classes", json={}).status_code == 401
    started = teacher.post("/api/classes", json={}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert started.status_code == 201, started.text
    code = started.json()["code"]

    student, classmate, stranger = browsers(), browsers(), browsers()
    assert _run(student).status_code == 401  # not a member yet: the token, as before
    for who, name in ((student, "Ana"), (classmate, "Ana")):
        assert who.get(f"/c/{code}").status_code == 200  # the join page makes it a member
        assert who.put(f"/api/classes/{code}/name", json={"name": name}).status_code == 200
    assert classmate.get(f"/api/classes/{code}").json()["me"]["name"] == "Ana (2)"

    # the member runs code, no token anywhere, and sends the run to the teacher
    ran = _run(student)
    assert ran.status_code == 200, ran.text
    doc = ran.json()
    assert doc["error"] is None and doc["params"]["w"]["uses"] == {"0": 2}
    run_id = doc["run"]["id"]
    assert student.get(f"/api/classes/{code}/runs/{run_id}").json()["yours"] is True
    assert student.post(f"/api/classes/{code}/runs", json={"run": run_id}).status_code == 200

    # the teacher sees the name: in the runs sent in and among the members
    state = teacher.get(f"/api/classes/{code}").json()
    assert [(s["name"], s["by"]) for s in state["submissions"]] == [("mine.py", "Ana")]
    roster = teacher.get(f"/api/classes/{code}/members").json()
    assert sorted(m["name"] for m in roster["members"]) == ["Ana", "Ana (2)"]
    ana = next(m for m in roster["members"] if m["name"] == "Ana")
    assert ana["runs_sent"] == 1

    # the teacher shows the run; a classmate following it may not send it as theirs
    teacher.put(f"/api/classes/{code}/view", json={"path": f"/runs/{run_id}"})
    assert classmate.get(f"/api/classes/{code}").json()["view"]["path"] == f"/runs/{run_id}"
    assert classmate.get(f"/api/classes/{code}/runs/{run_id}").json()["yours"] is False
    not_theirs = classmate.post(f"/api/classes/{code}/runs", json={"run": run_id})
    assert not_theirs.status_code == 403 and not_theirs.json()["code"] == "not_your_run"

    # a stranger still needs the token (and with it, may run)
    assert _run(stranger).status_code == 401
    assert _run(stranger, TOKEN).status_code == 200

    # a removed member loses the right at once; the one who stays keeps it
    assert teacher.delete(f"/api/classes/{code}/members/{ana['alias']}").status_code == 200
    refused = _run(student)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert student.get("/api/uploads").json()["token_required"] is True
    policy = classmate.get("/api/uploads").json()
    assert policy["token_required"] is False and policy["class_member"] == code
    assert _run(classmate).status_code == 200

    # the class ends: so does every member's right
    assert teacher.delete(f"/api/classes/{code}").status_code == 200
    assert _run(classmate).status_code == 401


def test_a_hostile_name_is_cleaned_capped_and_never_a_500(browsers, base):
    teacher = browsers()
    code = teacher.post("/api/classes", json={},
                        headers={"Authorization": f"Bearer {TOKEN}"}).json()["code"]
    student = browsers()
    assert student.get(f"/c/{code}").status_code == 200
    answer = student.put(f"/api/classes/{code}/name", json={"name": HOSTILE})
    assert answer.status_code == 200, answer.text
    name = answer.json()["name"]
    assert name == "<script>alert('x')</script>" + "é" * 13 and len(name) == 40
    # the teacher's stream carries it as a JSON string (a newline could not end an event)
    with teacher.stream("GET", f"/api/classes/{code}/events", timeout=10) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["members"] == 1
                break
    roster = teacher.get(f"/api/classes/{code}/members")
    assert roster.status_code == 200 and roster.json()["members"][0]["name"] == name
    for bad in ("\u202e\u200b", "", "x" * 17_000):
        refused = student.put(f"/api/classes/{code}/name", json={"name": bad})
        assert refused.status_code in (413, 422) and refused.json()["detail"]
    # a body that is no JSON object, or a name that is not text
    for body in (b"[1]", b"{", b'{"name": {"a": 1}}', b'{"name": 1e999}'):
        odd = student.put(f"/api/classes/{code}/name", content=body,
                          headers={"Content-Type": "application/json"})
        assert odd.status_code == 422, odd.text
    assert teacher.delete(f"/api/classes/{code}").status_code == 200
