"""The JSON API: every route, and every error as JSON with a `detail` a person can act on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from app.format import FORMAT, load_schema

ROOT = Path(__file__).resolve().parents[2]


def detail(response) -> str:
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"], body
    return body["detail"]


def test_healthz_answers_with_the_sandbox_state(client):
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    # this test app skips the self-test; a served one reports it (test_runs_server.py)
    assert body["sandbox"]["state"] == "off" and body["sandbox"]["ok"] is False
    # one machine: its own upload lane takes the runs, as many at once as its workers say
    line = body["uploads"]
    assert line["takers"] == "this process's upload lane" and "upload_hosts" not in line
    assert line["slots"] == body["workers"]["uploads_at_once"]
    assert (line["running"], line["waiting"], line["oldest_wait_s"]) == (0, 0, None)


def test_list_and_get_scenarios(client):
    listed = client.get("/api/scenarios").json()
    assert [s["name"] for s in listed] == ["tiny"]
    one = client.get("/api/scenarios/tiny").json()
    assert one["title"] == "A linear layer used twice"
    assert one["variants"] == {"twice": "the layer applied twice", "once": "the layer applied once"}
    assert one["options"]["scale"]["choices"] == [1, 2]
    assert one["default_variant"] == "twice"
    assert "Question:" in one["narration"]


def test_unknown_scenario_is_404_naming_the_known_ones(client):
    for url in ("/api/scenarios/nope", "/api/scenarios/nope/trace",
                "/api/scenarios/nope/graph.svg"):
        response = client.get(url)
        assert response.status_code == 404
        assert "no scenario named 'nope'" in detail(response) and "tiny" in detail(response)


def test_trace_is_a_valid_document_and_defaults_are_spelled_out(client):
    response = client.get("/api/scenarios/tiny/trace")
    assert response.status_code == 200
    doc = response.json()
    jsonschema.validate(doc, load_schema())
    assert doc["format"] == FORMAT
    assert doc["error"] is None
    # the default variant and option values are passed explicitly: the run is reproducible
    assert doc["script"]["args"] == ["--variant", "twice", "--scale", "1"]
    backward = [e for e in doc["events"] if e["kind"] == "backward"]
    assert backward and backward[0]["uses"]["weight"] == 2
    # asking with the defaults spelled out is the same run, served from the cache
    again = client.get("/api/scenarios/tiny/trace?variant=twice&scale=1&device=cpu").json()
    assert again == doc


def test_variant_changes_the_run(client):
    doc = client.get("/api/scenarios/tiny/trace?variant=once").json()
    assert doc["script"]["args"][:2] == ["--variant", "once"]
    backward = [e for e in doc["events"] if e["kind"] == "backward"]
    assert backward[0]["uses"]["weight"] == 1


def test_unknown_variant_is_404_listing_the_variants(client):
    response = client.get("/api/scenarios/tiny/trace?variant=thrice")
    assert response.status_code == 404
    assert "no variant 'thrice'" in detail(response) and "twice, once" in detail(response)


@pytest.mark.parametrize("query, words", [
    ("scale=3", "must be one of 1, 2, not '3'"),
    ("colour=red", "has no option 'colour'"),
    ("device=tpu", "unknown device 'tpu'"),
])
def test_bad_options_are_422_with_what_to_do(client, query, words):
    response = client.get(f"/api/scenarios/tiny/trace?{query}")
    assert response.status_code == 422
    assert words in detail(response)


def test_device_that_is_not_there_is_422_not_a_fallback(client):
    devices = client.get("/api/devices").json()["devices"]
    if "cuda" in devices or "cuda:0" in devices:
        pytest.skip("this machine has CUDA")
    response = client.get("/api/scenarios/tiny/graph.svg?device=cuda")
    assert response.status_code == 422
    assert "not available" in detail(response)


def test_busy_workers_are_503_with_retry_after(tiny_dir, settings):
    """A run that would wait behind a full queue is turned away at once, not left hanging."""
    import threading

    from fastapi.testclient import TestClient

    from app.web.app import create_app

    app = create_app(settings(scenario_workers=1, queue_size=0), scenarios_dir=tiny_dir)
    held, release = threading.Event(), threading.Event()

    def hold():
        with app.state.traces.scenarios.gate.enter():
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        held.wait(5)
        with TestClient(app) as c:
            response = c.get("/api/scenarios/tiny/trace")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        assert "try again" in detail(response)
        assert response.json()["code"] == "busy"  # error_handler.py's one handler, its code kept
    finally:
        release.set()
        thread.join()


def test_devices_lists_cpu(client):
    body = client.get("/api/devices").json()
    assert "cpu" in body["devices"] and body["torch"]


def test_graph_svg_nodes_carry_the_trace_ids(client):
    doc = client.get("/api/scenarios/tiny/trace").json()
    response = client.get("/api/scenarios/tiny/graph.svg")
    assert response.headers["content-type"].startswith("image/svg+xml")
    svg = ET.fromstring(response.content)
    ids = {g.get("id") for g in svg.iter("{http://www.w3.org/2000/svg}g")}
    graph = doc["events"][0]["graph"]
    assert {n["id"] for n in graph["nodes"]} <= ids
    assert {f"e-{e['source']}-{e['target']}-{e['slot']}" for e in graph["edges"]} <= ids


def test_graph_png_and_dot(client):
    png = client.get("/api/scenarios/tiny/graph.png?event=0")
    assert png.headers["content-type"] == "image/png" and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    dot = client.get("/api/scenarios/tiny/graph.dot")
    assert dot.headers["content-type"].startswith("text/vnd.graphviz")
    assert dot.text.lstrip().startswith("digraph")


def test_graph_errors(client):
    response = client.get("/api/scenarios/tiny/graph.gif")
    assert response.status_code == 404
    assert "graph.svg, graph.png, graph.dot or graph.json" in detail(response)
    response = client.get("/api/scenarios/tiny/graph.svg?event=99")
    assert response.status_code == 404 and "not a backward event" in detail(response)
    response = client.get("/api/scenarios/tiny/graph.svg?event=first")
    assert response.status_code == 422
    assert "query parameter 'event'" in detail(response) and "'first'" in detail(response)
    assert response.json()["errors"][0]["loc"] == ["query", "event"]


def test_schema_route_serves_the_trace_schema(client):
    schema = client.get("/api/schema/trace").json()
    assert schema["$id"] == FORMAT and schema == load_schema()


def test_openapi_documents_every_api_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/scenarios", "/api/scenarios/{name}", "/api/scenarios/{name}/trace",
                 "/api/scenarios/{name}/graph.{fmt}", "/api/devices", "/api/schema/trace",
                 "/healthz"):
        assert path in paths
    # a Trace route declares the document's shape: /docs shows it, as the format's types say
    spec = client.get("/openapi.json").json()
    for path in ("/api/scenarios/{name}/trace", "/api/runs/{run_id}"):
        schema = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        assert schema["schema"] == {"$ref": "#/components/schemas/Trace"}
    shown = spec["components"]["schemas"]["Trace"]
    assert set(shown["properties"]) == set(load_schema()["properties"])
    assert set(shown["required"]) == set(load_schema()["required"])
    docs = client.get("/docs").text
    bundle = r"/static/v/[0-9a-f]{12}/vendor/swagger-ui-dist-5\.35\.0/swagger-ui-bundle\.js"
    assert re.search(bundle, docs)
    assert "cdn" not in docs.lower()
    init = client.get("/static/js/swagger_init.js").text
    assert "validatorUrl: null" in init
    assert client.get("/redoc").status_code == 404  # it would load from a CDN


def test_real_scenario_trace(real_client):
    """One teaching scenario end to end: the option reaches the script."""
    doc = real_client.get("/api/scenarios/reused_layer/trace?k=2").json()
    assert doc["script"]["args"] == ["--k", "2"]
    backward = [e for e in doc["events"] if e["kind"] == "backward"][0]
    assert backward["uses"]["middle_linear.weight"] == 2


def test_web_layer_never_imports_torch():
    """The web process serves pages from Trace documents only (DESIGN.md)."""
    for path in (ROOT / "app" / "web").rglob("*.py"):
        text = path.read_text()
        assert "import torch" not in text and "from torch" not in text, path
    code = ("import sys; from app.web.app import create_app; create_app(); "
            "import app.web.routers.api, app.web.routers.pages; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))")
    done = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True,
                          text=True, cwd=ROOT, check=True)
    assert json.loads(done.stdout) == []


def test_every_html_page_forbids_inline_script(client):
    for path in ("/", "/scenarios/tiny", "/scenarios/tiny/compare", "/own-code", "/docs"):
        response = client.get(path)
        assert response.status_code == 200, path
        csp = response.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["script-src"] == "'self'", path  # no 'unsafe-inline', no other host
        assert directives["object-src"] == "'none'" and directives["base-uri"] == "'none'"
        # and the page has no inline script for the policy to break: only data blocks
        for tag in response.text.split("<script")[1:]:
            head = tag.split(">", 1)[0]
            assert "src=" in head or 'type="application/json"' in head, (path, head)
        handlers = re.findall(r"<[^>]*\son[a-z]+\s*=", response.text)
        assert not handlers, (path, handlers)  # inline event handlers are inline script too
    assert "content-security-policy" not in client.get("/api/scenarios").headers


def test_scenarios_are_traced_at_start_and_kept(tiny_dir, settings):
    """Every variant of every scenario, at its default options, is in the cache once the server
    has started: the first visitor of a scenario waits for no worker."""
    from fastapi.testclient import TestClient

    from app.web.app import create_app

    app = create_app(settings(warm_scenarios=True), scenarios_dir=tiny_dir)
    with TestClient(app) as c:
        traces = app.state.traces
        assert traces.warmed.wait(180)
        cached = {key[2] for key in traces._cache}
        assert cached == {("--variant", "twice", "--scale", "1"),
                          ("--variant", "once", "--scale", "1")}
        assert all(key[4] == traces.torch_version for key in traces._cache)
        # the page's first request is answered from it: the very run made at start-up
        kept = next(doc for key, doc in traces._cache.items() if "once" in key[2])
        doc = c.get("/api/scenarios/tiny/trace?variant=once").json()
        assert doc["script"]["args"] == ["--variant", "once", "--scale", "1"]
        assert doc["elapsed"] == kept["elapsed"] and doc["sandbox"] == kept["sandbox"]


def test_a_browser_gets_a_session_cookie_once_for_its_fair_share(tiny_dir, settings):
    from fastapi.testclient import TestClient

    from app.web.app import create_app
    from app.web.http.clients import COOKIE

    with TestClient(create_app(settings(), scenarios_dir=tiny_dir)) as c:
        assert "set-cookie" not in c.get("/api/scenarios").headers  # programs get none
        first = c.get("/").headers["set-cookie"]
        assert first.startswith(f"{COOKIE}=") and "HttpOnly" in first
        assert "SameSite=Lax" in first
        assert "set-cookie" not in c.get("/own-code").headers  # it has one now: kept
        assert c.cookies.get(COOKIE)


def test_a_made_up_cookie_is_nobody_and_is_replaced(tiny_dir, settings):
    """Cookies are signed by the server: an invented one does not make a new person (in the
    run queue, in a class's tally), and a browser that sends one gets a real one."""
    from fastapi.testclient import TestClient
    from starlette.requests import Request

    from app.web.app import create_app
    from app.web.http.clients import COOKIE, client_key, new_cookie_value

    def key(cookie: str) -> str:
        scope = {"type": "http", "headers": [(b"cookie", f"{COOKIE}={cookie}".encode())],
                 "client": ("10.1.2.3", 5000)}
        return client_key(Request(scope))

    real = new_cookie_value()
    assert key(real).startswith("cookie:")
    token, sig = real.split(".")
    for forged in ("x" * 30, f"{token}.{'A' * 22}", f"{'B' * 24}.{sig}", token):
        assert key(forged) == "address:10.1.2.3", forged
    with TestClient(create_app(settings(), scenarios_dir=tiny_dir)) as c:
        c.cookies.set(COOKIE, "made-up-" + "x" * 20)
        given = c.get("/").headers.get("set-cookie", "")
        assert given.startswith(f"{COOKIE}=") and "made-up" not in given


def test_graph_layout_errors_say_what_is_allowed(client):
    response = client.get("/api/scenarios/tiny/graph.svg?layout=sideways")
    assert response.status_code == 422 and "layout" in detail(response)
    response = client.get("/api/scenarios/tiny/graph.svg?depth=-1")
    assert response.status_code == 422 and "depth" in detail(response)
    response = client.get("/api/scenarios/tiny/graph.json?open=" + "x" * 1001)
    assert response.status_code == 422 and "longer than 1000" in detail(response)
    # a small graph is drawn flat whatever the default, and says so
    layout = client.get("/api/scenarios/tiny/graph.json").json()
    assert layout["grouping"]["flat"] and layout["units"] == []
    assert layout["nodes"] == layout["flat_nodes"] > 3


def test_gradient_flow_of_a_scenario(client):
    flow = client.get("/api/scenarios/tiny/gradient-flow").json()
    trace = client.get("/api/scenarios/tiny/trace").json()
    backward = [e for e in trace["events"] if e["kind"] == "backward"]
    assert [e["event"] for e in flow["events"]] == [e["index"] for e in backward]
    names = [p for m in flow["modules"] for p in m["params"]]
    assert sorted(names) == sorted(n for n, p in trace["params"].items() if p["requires_grad"])
    for name in names:  # each parameter's norm after each pass is the trace's own
        assert flow["params"][name]["norm"] == [
            e["grads"][name]["after"]["norm"] if e["grads"][name]["after"] else None
            for e in backward]


def test_the_device_list_is_asked_once_and_a_slow_answer_is_no_500(settings):
    """GET /api/devices started a new worker on every request, and a slow one ended in an
    unhandled TimeoutExpired. Now one question per process: while it is out a request is told
    it is still being checked (503, Retry-After), and then every request has the list."""
    from app.web.runs.trace_service import DevicesUnknown, TraceService

    service = TraceService(settings())
    with pytest.raises(DevicesUnknown, match="still checking") as caught:
        service.devices(wait=0)  # the question has only just gone out
    assert caught.value.still_checking
    first = service.devices(wait=120)
    assert "cpu" in first["devices"]
    assert service.devices(wait=0) is first  # asked once: the same answer, at once
