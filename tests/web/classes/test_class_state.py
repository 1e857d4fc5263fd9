"""A class's stored state (app/web/classes/state.py) is a dataclass kept as JSON through
`dataclasses.asdict`: what is written is read back equal, and a row the previous release wrote
(members as a list, made by hand) is read as the same class."""

from __future__ import annotations

import json

from app.web.classes.state import ClassState


def a_class() -> ClassState:
    state = ClassState("ABCDEF", "cookie:teacher", people=4)
    state.admit("cookie:ann", "10.0.0.2")
    state.admit("cookie:bob", "10.0.0.3")
    state.rename("cookie:ann", "Ana")
    question = state.ask("Which?", ["a", "b", "c"], 2)
    state.answer("cookie:ann", question["id"], 1, "10.0.0.2")
    state.submit("cookie:ann", "run1", "script.py", "10.0.0.2", owner="cookie:ann")
    state.remove(state.members["cookie:bob"].alias)
    state.show("/runs/run1", "node=n3")
    return state


def test_what_is_written_is_read_back_equal():
    state = a_class()
    text = json.dumps(state.to_dict())  # JSON as PostgreSQL's jsonb keeps it
    again = ClassState.from_dict(json.loads(text))
    assert again == state
    assert again.removed == {"cookie:bob"} and again.sent_from["run1"] == ("cookie:ann",
                                                                            "10.0.0.2")
    assert again.snapshot("cookie:ann") == state.snapshot("cookie:ann")


def test_a_row_of_the_previous_release_is_the_same_class():
    state = a_class()
    # the previous release's ClassSession.to_state, field by field as it wrote them
    old = {"code": state.code, "teacher": state.teacher, "created": state.created,
           "version": state.version, "audience": state.audience, "view": state.view,
           "question": state.question, "answers": state.answers,
           "submissions": state.submissions, "people": state.people,
           "shared_at": state.shared_at, "answered_from": state.answered_from,
           "sent_by": state.sent_by,
           "sent_from": {k: list(v) for k, v in state.sent_from.items()},
           "members": [{"client": m.client, "address": m.address, "alias": m.alias,
                        "joined": m.joined, "name": m.name, "renames": m.renames}
                       for m in state.members.values()],
           "removed": sorted(state.removed), "at_address": state.at_address,
           "places": state.places, "turned_away": sorted(state.turned_away),
           "ended": state.ended}
    loaded = ClassState.from_dict(json.loads(json.dumps(old)))
    # that release kept no count of removed members per address (removed_at): in its rows their
    # places at their addresses are free again, as they were under it
    assert state.removed_at and loaded.removed_at == {}
    loaded.removed_at = state.removed_at
    assert loaded == state


def test_a_question_goes_away_when_the_teacher_moves_on():
    """Another page, variant or presenter step puts the question away; a node picked, a replay
    step, or presenting the page it was asked on keeps it (moving_on.py)."""
    state = ClassState("ABCDEF", "cookie:teacher", people=4)
    state.show("/scenarios/reused_layer", "")
    state.ask("Which?", ["a", "b"], 1)
    for query in ("node=n3", "node=n3&step=2", "present=1&say=3", "present=1&say=3&step=1",
                  "node=n1"):
        state.show("/scenarios/reused_layer", query)
        assert state.question is not None, query
    state.show("/scenarios/reused_layer", "present=1&say=2")  # the next presenter step
    assert state.question is None
    for moving_on in ("/scenarios/stop_gradient", "/scenarios/reused_layer?variant=k1"):
        state.show("/scenarios/reused_layer", "present=1&say=3")
        state.ask("Which?", ["a", "b"], 1)
        path, _, query = moving_on.partition("?")
        state.show(path, query)
        assert state.question is None, moving_on


def test_a_run_is_named_as_whose_it_is():
    """A run another member's page shows is titled by whose it is: the member who sent it, the
    teacher, or (started by someone the class does not know) nobody named."""
    state = a_class()
    assert state.whose("run1", "cookie:ann") == "Ana"  # sent in by Ana
    assert state.whose("run2", "cookie:teacher") == "the teacher"
    assert state.whose("run3", "cookie:ann") == "Ana"  # hers, not sent
    assert state.whose("run4", "cookie:stranger") is None
    assert state.whose("run5", None) is None
