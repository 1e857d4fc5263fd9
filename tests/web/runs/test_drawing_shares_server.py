"""Drawings as a fair resource, the holes an attacker's read found in the first version (issue
38), against a real server and real graphviz, each hostile run a forged report:

1. fresh cookies are fresh people: two cookies from one address each upload a dense forged run,
   and their first looks took both upload drawing slots; an address now holds at most its
   share (never every slot), so a person at another address is drawn meanwhile;
2. a render past graphviz's time was remembered per grouping, and the grouping is the asker's
   to choose: after GIVE_UPS_PER_TRACE give-ups only a much smaller drawing of the run is started;
3. a person's waiting requests held the server's threads: past REQUESTS_AT_ONCE under way,
   their drawings are refused at once, and a scenario's drawing is not slowed.

Each ends with a scenario drawn and a normal run that works."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from app.web.runs.drawings import GIVE_UPS_PER_TRACE, REQUESTS_AT_ONCE
from tests.server import serve
from tests.web.runs.test_fair_drawings_server import (
    QUIET,
    SCENARIO,
    _post,
    _then_all_is_well,
    _timed_get,
)
from tests.web.runs.test_forged_reports_server import SMALL, VALID_FORGERY, WRITE_AND_LEAVE
from tests.web.runs.test_orphan_render_server import _children_named, _dense_forgery

pytestmark = pytest.mark.slow


@contextmanager
def _browser(base: str, address: str = "127.0.0.1",
             connections: int = 10) -> Iterator[httpx.Client]:
    """A person: a browser from `address` (another loopback address stands for another machine
    where the server keeps loopback addresses apart), with the cookie its first page gave it."""
    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=connections),
                      transport=httpx.HTTPTransport(local_address=address)) as client:
        assert client.get(base + "/").status_code == 200
        assert len(client.cookies.jar), "no session cookie was handed out"
        yield client


def _moduled_dense_forgery() -> str:
    """800 ops in 20 top-level modules, 3,000 edges at random: graphviz cannot lay it out flat,
    nor with most modules open, in a few seconds."""
    return (f"import json, random\nforged = {VALID_FORGERY!r}\nrng = random.Random(0)\n"
            "forged['events'][0]['graph'] = {'roots': ['n0'], 'nodes': [{'id': f'n{i}', "
            "'name': f'Op{i}', 'kind': 'op', 'module': f'm{i % 20}'} for i in range(800)], "
            "'edges': [{'source': f'n{rng.randrange(1, 800)}', 'target': f'n{rng.randrange(800)}', "
            "'slot': k} for k in range(3000)]}\nreport = json.dumps(forged)" + WRITE_AND_LEAVE)


def test_fresh_cookies_from_one_address_hold_only_its_share_of_the_drawings(tmp_path):
    info: dict = {}
    with serve(tmp_path, name="drawing-shares-address", info=info, MAX_DRAWINGS="2",
               DRAWING_TIMEOUT="25", LOOPBACK_ADDRESSES_APART="true", **QUIET) as base:
        with ExitStack() as stack:
            # one machine, two cookies: two "people"
            hogs = [stack.enter_context(_browser(base)) for _ in range(2)]
            ids: list = []
            uploads = [threading.Thread(target=lambda h=h: ids.append(_post(h, base,
                                                                             _dense_forgery())))
                       for h in hogs]
            [t.start() for t in uploads]
            [t.join(180) for t in uploads]
            assert len(ids) == 2
            deadline = time.monotonic() + 60
            while not _children_named(info["pid"], "dot"):
                assert time.monotonic() < deadline, "the server never started graphviz"
                time.sleep(0.1)
            time.sleep(4)  # past the second first look's TURN_PATIENCE
            dots = len(_children_named(info["pid"], "dot"))
            print(f"graphviz for the two cookies of one address: {dots}")
            assert dots == 1  # before: 2, every upload drawing slot
            with _browser(base, "127.0.0.2") as honest:  # another machine
                theirs = _post(honest, base, SMALL)
                svg, took = _timed_get(honest, f"{base}/api/runs/{theirs}/graph.svg", 120)
                print(f"a person at another address, drawn in {took:.2f} s")
                assert svg.status_code == 200 and b"<svg" in svg.content
                assert took < 15, took  # coarse: was the hogs' whole DRAWING_TIMEOUT (25 s)
            # a cookie of the hogs' address asking for another picture: its share is taken
            refused, took = _timed_get(hogs[1], f"{base}/api/runs/{ids[1]}/graph.png?font=3")
            print(f"one of the address's cookies: {refused.status_code} after {took:.2f} s")
            assert refused.status_code == 429, refused.text[:300]
            assert refused.headers.get("retry-after")
            assert "network address" in refused.json()["detail"] or \
                "one made at a time" in refused.json()["detail"]
        _then_all_is_well(base, "127.0.0.3")  # another machine: the hogs' still renders


def test_after_graphviz_gave_up_twice_no_other_grouping_of_the_run_is_started(tmp_path):
    with serve(tmp_path, name="drawing-shares-give-ups", DRAWING_TIMEOUT="3", **QUIET) as base:
        with httpx.Client(timeout=120) as person:
            run_id = _post(person, base, _moduled_dense_forgery())
            time.sleep(4)  # the first look's render, if any, ends
            modules = [f"m{j}" for j in range(20)]
            asks = ["layout=flat"] + [
                "depth=1&" + "&".join(f"open={m}" for m in modules if m != shut)
                for shut in modules[:5]]
            answers = []
            for query in asks:
                answer, took = _timed_get(person, f"{base}/api/runs/{run_id}/graph.svg?{query}")
                print(f"{query[:30]:30} {answer.status_code} after {took:.2f} s")
                answers.append((answer, took))
        slow = [took for _, took in answers if took >= 2.5]  # a render to graphviz's limit
        print(f"renders to the limit: {len(slow)} of {len(answers)}")
        assert len(slow) <= GIVE_UPS_PER_TRACE  # before: one per grouping asked for
        refused = [a for a, _ in answers if a.status_code == 429]
        assert refused, [a.status_code for a, _ in answers]
        assert "too big for graphviz" in refused[-1].json()["detail"]
        assert refused[-1].headers.get("retry-after")
        assert all(took < 2 for a, took in answers if a.status_code == 429)
        _then_all_is_well(base)


def test_a_persons_flood_of_drawing_requests_holds_no_threads(tmp_path):
    info: dict = {}
    with serve(tmp_path, name="drawing-shares-waiters", info=info, DRAWING_TIMEOUT="40",
               LOOPBACK_ADDRESSES_APART="true", **QUIET) as base:
        assert httpx.get(base + SCENARIO, timeout=120).status_code == 200  # drawn, cached
        with _browser(base, connections=100) as hog:
            run_id = _post(hog, base, _dense_forgery())
            deadline = time.monotonic() + 60
            while not _children_named(info["pid"], "dot"):  # its first look renders
                assert time.monotonic() < deadline, "the server never started graphviz"
                time.sleep(0.1)
            answers: list = []

            def ask(i: int) -> None:
                url = f"{base}/api/runs/{run_id}/graph.png?layout=flat&font={1 + (i % 5) / 2}"
                answers.append(_timed_get(hog, url, 60))

            flood = [threading.Thread(target=ask, args=(i,)) for i in range(80)]
            [t.start() for t in flood]
            time.sleep(0.5)
            scenario, took = _timed_get(httpx, base + SCENARIO, 60)
            print(f"cached scenario drawing during the flood: {took:.2f} s")
            [t.join(60) for t in flood]
        codes = [a.status_code for a, _ in answers]
        at_once = [took for a, took in answers if a.status_code == 429 and took < 1.5]
        print(f"flood: {len(answers)} answers {sorted(set(codes))}, {len(at_once)} refused "
              "at once")
        assert scenario.status_code == 200 and b"<svg" in scenario.content
        assert set(codes) <= {429}, codes
        # before: each waited TURN_PATIENCE in a thread of the server's
        assert len(at_once) >= len(answers) - REQUESTS_AT_ONCE, len(at_once)
        assert took < 3, took  # coarse: was 5 s behind the waiting threads
        _then_all_is_well(base, "127.0.0.3")  # another machine: the hog's still renders
