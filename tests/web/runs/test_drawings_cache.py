"""Drawings apart from Traces (drawings.py): a stored run's drawing, once made, is served
without reading its Trace again, and a request reads a stored Trace at most once. Counted on
the real run store (a spy that calls the real `RunStore.get`: read, un-gzip, parse)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.web.app import create_app
from app.web.store.sqlite import RunStore
from tests.web.conftest import LOCAL

SCRIPT = """\
import torch
w = torch.randn(3, requires_grad=True)
loss = (w * 2).sum() + (w * w).sum()
loss.backward()
"""


@pytest.fixture(scope="module")
def client_(settings, tiny_dir):
    with TestClient(create_app(settings(), scenarios_dir=tiny_dir), client=LOCAL) as c:
        yield c


@pytest.fixture
def reads(monkeypatch):
    """How many times a stored Trace was read and parsed, by run id."""
    counted: dict[str, int] = {}
    real = RunStore.get

    def get(self, run_id):
        counted[run_id] = counted.get(run_id, 0) + 1
        return real(self, run_id)

    monkeypatch.setattr(RunStore, "get", get)
    return counted


def _run(client, forgotten: bool = True) -> str:
    """A stored run; `forgotten`: as minutes later, when the queue no longer holds its Trace
    parsed (runs/queue.py `recent`) and only the store has it."""
    response = client.post("/api/runs", json={"source": SCRIPT, "name": "two_uses.py"})
    assert response.status_code == 200, response.text
    assert response.json()["error"] is None
    run_id = response.json()["run"]["id"]
    if forgotten:
        book = client.app.state.uploads.queue.book
        with book._lock:
            book._jobs.pop(run_id, None)
    return run_id


def test_a_run_that_just_ended_is_drawn_without_reading_the_store(client_, reads):
    """Its page's first requests are made from the Trace the queue still holds (first_look.py):
    the same pictures as those drawn from the stored Trace, none of them reading it."""
    run_id = _run(client_, forgotten=False)
    fresh = {path: client_.get(f"/api/runs/{run_id}/{path}")
             for path in ("graph.svg", "graph.json", "gradient-flow", "graph.dot?layout=flat")}
    assert all(r.status_code == 200 for r in fresh.values()), fresh
    assert reads.get(run_id, 0) == 0, reads
    # the same run drawn by a server that only has the store: the same answers
    other = client_.app.state.drawings.__class__(client_.app.state.settings)
    store = client_.app.state.store
    doc = store.get(run_id)
    assert other.drawing(("x", run_id), lambda: doc, None, "svg") == fresh["graph.svg"].content
    assert other.drawing(("x", run_id), lambda: doc, None, "json") == \
        fresh["graph.json"].content


def test_a_cached_drawing_of_a_stored_run_is_served_without_parsing_its_trace(client_, reads):
    run_id = _run(client_)
    reads.clear()
    first = client_.get(f"/api/runs/{run_id}/graph.svg")
    assert first.status_code == 200 and first.text.lstrip().startswith("<?xml")
    assert reads == {run_id: 1}  # drawn: the Trace read once, not once per step
    for _ in range(3):
        again = client_.get(f"/api/runs/{run_id}/graph.svg")
        assert again.status_code == 200 and again.content == first.content
    assert reads == {run_id: 1}, "a kept drawing read the stored Trace again"
    # another format or layout is another drawing: read once more, then kept too
    assert client_.get(f"/api/runs/{run_id}/graph.dot?layout=flat").status_code == 200
    assert client_.get(f"/api/runs/{run_id}/graph.dot?layout=flat").status_code == 200
    assert reads == {run_id: 2}


def test_a_dropped_run_is_not_served_from_the_drawing_cache(client_, reads):
    run_id = _run(client_)
    assert client_.get(f"/api/runs/{run_id}/graph.svg").status_code == 200
    store = client_.app.state.store
    with store._connect() as db:  # as the store drops its oldest runs to make room
        db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    gone = client_.get(f"/api/runs/{run_id}/graph.svg")
    assert gone.status_code == 404 and "no run" in gone.json()["detail"]


@pytest.mark.parametrize("path", ["/runs/{id}", "/api/runs/{id}", "/api/runs/{id}/gradient-flow",
                                  "/api/runs/{id}/graph.json"])
def test_each_request_reads_a_stored_trace_at_most_once(client_, reads, path):
    run_id = _run(client_)
    reads.clear()
    response = client_.get(path.format(id=run_id))
    assert response.status_code == 200, response.text
    assert reads.get(run_id, 0) <= 1, reads


def test_a_refused_drawing_keeps_no_trace_alive(settings, monkeypatch):
    """A drawing graphviz refuses is kept as its message: raising the kept error again and
    again grew its traceback, whose frames held the whole parsed Trace they drew from."""
    import gc
    import weakref

    import app.web.runs.drawings as drawings_module
    from app.render import RenderError
    from app.web.runs.drawings import Drawings

    def refuse(*args, **kwargs):
        raise RenderError("graphviz gave up on this one")

    monkeypatch.setattr(drawings_module, "render_graph", refuse)

    class Trace(dict):  # a dict that a weak reference can follow
        pass

    doc = Trace(events=[{"kind": "backward", "index": 0, "graph": {
        "nodes": [{"id": "n0", "name": "SumBackward0", "kind": "op"}], "edges": []}}])
    gone = weakref.ref(doc)
    drawings = Drawings(settings())
    for _ in range(3):  # drawn once, then refused from the cache
        with pytest.raises(RenderError, match="gave up"):
            drawings.drawing(("run", "x"), lambda doc=doc: doc, 0, "svg")
    del doc
    gc.collect()
    assert gone() is None, "a kept refusal still holds the Trace"


def test_the_first_look_is_the_picture_the_page_asks_for(client_, monkeypatch):
    """A small graph: the run page asks for its SVG in larger type (font=2, no graph.json);
    made as the run was stored (first_look.py), the page's request draws nothing more."""
    import time

    import app.web.runs.drawings as drawings_module

    drawn: list[float] = []
    real = drawings_module.render_graph

    def counted(graph, fmt, font=1.0, **kwargs):
        drawn.append(font)
        return real(graph, fmt, font=font, **kwargs)

    monkeypatch.setattr(drawings_module, "render_graph", counted)
    run_id = _run(client_, forgotten=False)
    deadline = time.monotonic() + 30
    while not drawn and time.monotonic() < deadline:  # made on the run's thread, after it ends
        time.sleep(0.05)
    assert drawn == [2.0], drawn
    svg = client_.get(f"/api/runs/{run_id}/graph.svg?event=0&font=2")  # as the page asks
    assert svg.status_code == 200 and svg.text.lstrip().startswith("<?xml")
    assert drawn == [2.0], drawn  # served as made
