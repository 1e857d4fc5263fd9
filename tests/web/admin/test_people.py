"""The admin page's runs per person (app/web/admin/people.py) are bounded whatever the runs
say: at most PEOPLE_SHOWN people and RUNS_PER_PERSON runs each (the count says how many
there were), every name cut to MAX_TEXT characters, a cookie never shown, an address only
to the reader allowed it."""

from __future__ import annotations

from app.web.admin.people import MAX_TEXT, PEOPLE_SHOWN, RUNS_PER_PERSON, by_person
from app.web.classes.state import ClassState


def _run(n: int, client: str, name: str = "script.py", state: str = "stored") -> dict:
    return {"id": f"run{n}", "client": client, "address": "192.0.2.9", "name": name,
            "state": state, "age_s": float(n)}


def test_people_and_their_runs_are_bounded_and_named_by_alias():
    many = [_run(n, f"cookie:person-{n}") for n in range(PEOPLE_SHOWN + 10)]
    busy = [_run(1000 + n, "cookie:busy", "x" * 5000) for n in range(RUNS_PER_PERSON + 5)]
    people = by_person(busy + many, [], addresses=False)
    assert len(people) == PEOPLE_SHOWN
    first = people[0]
    assert first["count"] == RUNS_PER_PERSON + 5 and len(first["runs"]) == RUNS_PER_PERSON
    assert all(len(r["name"]) == MAX_TEXT for r in first["runs"])
    assert first["alias"].startswith("student-") and "cookie" not in str(people)
    assert all(p["address"] is None for p in people)


def test_a_member_is_named_as_in_the_class_and_a_program_by_its_kind():
    state = ClassState(code="ABCDEF", teacher="cookie:teacher")
    state.admit("cookie:ann", "192.0.2.9")
    state.rename("cookie:ann", "Ann")
    runs = [_run(1, "cookie:ann", state="running"), _run(2, "192.0.2.10"),
            _run(3, "cookie:teacher")]
    ann, program, teacher = by_person(runs, [state], addresses=True)
    assert (ann["alias"], ann["name"], ann["class"]) == \
        (state.members["cookie:ann"].alias, "Ann", "ABCDEF")
    assert ann["runs"][0]["live"] is True and ann["address"] == "192.0.2.9"
    assert program["alias"] == "a program" and program["runs"][0]["live"] is False
    assert teacher["name"] == "the teacher" and teacher["class"] == "ABCDEF"
    assert teacher["alias"].startswith("teacher-")
