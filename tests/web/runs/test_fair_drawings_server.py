"""Drawings as a fair resource (issue 38, point 1), against a real server and real graphviz,
each hostile run a forged report (a script that writes its own trace.json and leaves):

1. one person's dense forged run hogging graphviz: while its flat drawing renders, a scenario's
   drawing is drawn in seconds, another person's run is drawn, and the hog's second drawing is
   refused at once (429 with Retry-After), not started;
2. a drawing past graphviz's time is remembered: asked again, in any format or type size, it is
   refused at once with the same sentence;
3. a flood of variants (type sizes, depths, formats) of one run is refused past
   `drawing_variants`, and a scenario's drawing cached before is still served from the cache.

Each ends with a scenario drawn and a normal run that works."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.metrics_scrape import scrape, value
from tests.server import serve
from tests.web.runs.test_forged_reports_server import SMALL, VALID_FORGERY, WRITE_AND_LEAVE
from tests.web.runs.test_orphan_render_server import _children_named, _dense_forgery

pytestmark = pytest.mark.slow

SCENARIO = "/api/scenarios/reused_layer/graph.svg"
QUIET = {"POOL_SIZE": "0", "SELFTEST": "false", "WARM_SCENARIOS": "false"}


def _moduled_forgery(depth: int = 6, nodes: int = 24) -> str:
    """A small report whose nodes sit in modules `depth` levels deep: each depth draws another
    grouping, so type sizes x depths x formats make many distinct drawings of one graph."""
    return (f"import json\nforged = {VALID_FORGERY!r}\n"
            "forged['events'][0]['graph'] = {'roots': ['n0'], 'nodes': [{'id': f'n{i}', "
            "'name': f'Op{i}', 'kind': 'op', 'module': '.'.join(f'm{(i >> k) & 1}x' for k in "
            f"range({depth}))}} for i in range({nodes})], 'edges': [{{'source': f'n{{i + 1}}', "
            f"'target': f'n{{i}}', 'slot': 0}} for i in range({nodes - 1})]}}\n"
            "report = json.dumps(forged)" + WRITE_AND_LEAVE)


def _post(client: httpx.Client, base: str, source: str) -> str:
    response = client.post(base + "/api/runs", json={"source": source}, timeout=180)
    assert response.status_code == 200, response.text[:500]
    assert response.json()["error"] is None, response.json()["error"]
    return response.json()["run"]["id"]


@contextmanager
def _person(base: str, address: str = "127.0.0.1") -> Iterator[httpx.Client]:
    """Another person: a browser with the session cookie its first page gave it, from `address`
    (another loopback address is another machine where the server keeps them apart)."""
    with httpx.Client(timeout=120,
                      transport=httpx.HTTPTransport(local_address=address)) as client:
        assert client.get(base + "/").status_code == 200
        assert len(client.cookies.jar), "no session cookie was handed out"
        yield client


def _timed_get(client, url: str, timeout: float = 120) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = client.get(url, timeout=timeout)
    return response, time.monotonic() - started


def _then_all_is_well(base: str, address: str = "127.0.0.1") -> None:
    drawn, took = _timed_get(httpx, base + SCENARIO)
    assert drawn.status_code == 200 and b"<svg" in drawn.content
    print(f"scenario drawing afterwards: {took:.2f} s")
    assert took < 5  # a cached picture; coarse, for a busy machine
    with _person(base, address) as someone:
        run_id = _post(someone, base, SMALL)
        svg = someone.get(f"{base}/api/runs/{run_id}/graph.svg")
        assert svg.status_code == 200 and b"<svg" in svg.content


def test_a_hog_keeps_neither_the_scenarios_nor_another_person_from_drawings(tmp_path):
    info: dict = {}
    # loopback addresses apart: the other person is at another machine (one address has at
    # most its share of the drawings, never every slot)
    with serve(tmp_path, name="fair-drawings-hog", info=info, MAX_DRAWINGS="2",
               LOOPBACK_ADDRESSES_APART="true", **QUIET) as base:
        assert httpx.get(base + "/api/scenarios/reused_layer/trace", timeout=120).is_success
        with httpx.Client(timeout=300) as hog:  # a program: its address is the person
            run_id = _post(hog, base, _dense_forgery())
            # the run's first look now lays its flat graph out (a minute of graphviz)
            deadline = time.monotonic() + 60
            while not _children_named(info["pid"], "dot"):
                assert time.monotonic() < deadline, "the server never started graphviz"
                time.sleep(0.1)
            second: dict = {}

            def another_variant():  # before issue 38: a second minute of graphviz, 2 of 2
                second["response"], second["took"] = _timed_get(
                    hog, f"{base}/api/runs/{run_id}/graph.png?layout=flat", 300)

            asker = threading.Thread(target=another_variant, daemon=True)
            asker.start()
            time.sleep(1.0)
            scenario, took = _timed_get(httpx, base + SCENARIO, 120)
            print(f"scenario drawing while the hog renders: {took:.2f} s")
            assert scenario.status_code == 200 and b"<svg" in scenario.content
            assert took < 10, took  # coarse: was the hog's whole minute
            with _person(base, "127.0.0.2") as other:
                theirs = _post(other, base, SMALL)
                svg, took = _timed_get(other, f"{base}/api/runs/{theirs}/graph.svg", 120)
                print(f"another person's drawing while the hog renders: {took:.2f} s")
                assert svg.status_code == 200 and b"<svg" in svg.content
                assert took < 20, took
            asker.join(30)
            assert "response" in second, "the hog's second drawing was started, not refused"
            refused = second["response"]
            print(f"the hog's second drawing refused after {second['took']:.2f} s")
            assert refused.status_code == 429, refused.text[:300]
            assert refused.headers.get("retry-after")
            assert "one made at a time" in refused.json()["detail"]
            assert len(_children_named(info["pid"], "dot")) <= 1  # the first look's only
        _then_all_is_well(base, "127.0.0.3")  # another machine: the hog's still renders


def test_a_drawing_past_graphviz_time_is_refused_again_at_once(tmp_path):
    with serve(tmp_path, name="fair-drawings-timeout", DRAWING_TIMEOUT="2", **QUIET) as base:
        with httpx.Client(timeout=60) as person:
            run_id = _post(person, base, _dense_forgery())
            link = f"{base}/api/runs/{run_id}/graph.svg?layout=flat"
            first, took = _timed_get(person, link, 60)
            print(f"first ask: {first.status_code} after {took:.2f} s")
            assert first.status_code == 422, first.text[:300]
            sentence = first.json()["detail"]
            assert "longer than 2 s" in sentence
            for again in (link, link.replace("graph.svg", "graph.png") + "&font=2"):
                answer, took = _timed_get(person, again, 60)
                print(f"asked again ({again.rsplit('/', 1)[1]}): {took:.2f} s")
                assert answer.status_code == 422 and answer.json()["detail"] == sentence
                assert took < 2, took  # no other render: it would take the whole 2 s
        _then_all_is_well(base)


def test_a_flood_of_variants_is_refused_and_evicts_no_scenario_drawing(tmp_path):
    with serve(tmp_path, name="fair-drawings-flood", DRAWING_VARIANTS="8", CACHE_SIZE="4",
               METRICS="1", **QUIET) as base:
        assert httpx.get(base + SCENARIO, timeout=120).status_code == 200  # drawn, cached
        with httpx.Client(timeout=60) as person:
            run_id = _post(person, base, _moduled_forgery())
            answers = []
            for font in ("1", "1.5", "2", "2.5", "3"):
                for depth in range(1, 7):
                    for fmt in ("svg", "png"):
                        answers.append(person.get(
                            f"{base}/api/runs/{run_id}/graph.{fmt}?depth={depth}&font={font}"))
        made = [a for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code == 429]
        print(f"flood: {len(made)} drawn, {len(refused)} refused of {len(answers)}")
        assert len(made) + len(refused) == len(answers), {a.status_code for a in answers}
        assert len(made) <= 8 and refused, len(made)
        assert "drawings of this graph have been made already" in refused[0].json()["detail"]
        assert refused[0].headers.get("retry-after")
        before = scrape(httpx.get(base + "/metrics").text)
        cached, took = _timed_get(httpx, base + SCENARIO)
        after = scrape(httpx.get(base + "/metrics").text)
        print(f"cached scenario drawing after the flood: {took:.3f} s")
        assert cached.status_code == 200 and b"<svg" in cached.content
        name = "autograd_lab_drawings_total"
        assert value(after, name, result="drawn") == value(before, name, result="drawn")
        assert value(after, name, result="cached") > value(before, name, result="cached")
        _then_all_is_well(base)

