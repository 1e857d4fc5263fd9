"""One error type, answered one way (http/error_handler.py): a page request gets the error page,
an API request gets JSON `{"detail", "code"}`, whichever part of the app refused it (issue 18)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.web.app import create_app
from tests.web.conftest import LOCAL

ROUTERS = Path(__file__).resolve().parents[3] / "app" / "web" / "routers"
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def page_error(response, status: int) -> str:
    """The error page's text, after checking it is one."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    # it is a page like any other: the app's CSP, the way back
    assert "content-security-policy" in response.headers
    assert 'href="/"' in response.text
    return response.text


def api_error(response, status: int, code: str) -> str:
    """The JSON error's detail, after checking its shape, status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"detail", "code"} and body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return body["detail"]


def test_a_missing_page_is_the_error_page_with_a_way_on(client):
    for headers in (BROWSER, {}):  # a browser, or curl's */*
        text = page_error(client.get("/no-such-page", headers=headers), 404)
        assert "No such page" in text and "there is no page at /no-such-page" in text


def test_a_missing_scenario_page_names_the_scenarios(client):
    text = page_error(client.get("/scenarios/nope", headers=BROWSER), 404)
    assert "No such scenario" in text and "no scenario named" in text and "tiny" in text
    page_error(client.get("/scenarios/nope/compare", headers=BROWSER), 404)
    # a program that asks a page path for JSON gets JSON
    detail = api_error(client.get("/scenarios/nope", headers={"Accept": "application/json"}),
                       404, "no_scenario")
    assert "tiny" in detail


def test_a_missing_run_page_is_the_error_page(client):
    # raised by routers/runs.py, still a FastAPI HTTPException: the same handler answers it
    assert "nope" in page_error(client.get("/runs/nope", headers=BROWSER), 404)


def test_a_missing_api_route_or_resource_is_json_whatever_the_accept(client):
    for headers in (BROWSER, {}):
        detail = api_error(client.get("/api/no-such", headers=headers), 404, "no_route")
        assert "/docs" in detail
        detail = api_error(client.get("/api/scenarios/nope", headers=headers), 404,
                           "no_scenario")
        assert "no scenario named 'nope'" in detail and "tiny" in detail


def test_an_exception_kind_of_a_lower_layer_keeps_its_status(client):
    detail = api_error(client.get("/api/scenarios/tiny/trace?variant=thrice"), 404,
                       "unknown_variant")
    assert "no variant 'thrice'" in detail
    assert "graph.json" in api_error(client.get("/api/scenarios/tiny/graph.gif"), 404,
                                     "no_format")


def test_a_method_the_route_lacks_is_405_saying_which_it_has(client):
    response = client.post("/api/scenarios", json={})
    detail = api_error(response, 405, "method_not_allowed")
    assert "GET" in detail and response.headers["allow"] == "GET"


def test_request_validation_keeps_its_sentence_and_records(client):
    response = client.get("/api/scenarios/tiny/graph.svg?event=first")
    body = response.json()
    assert response.status_code == 422 and "query parameter 'event'" in body["detail"]
    assert body["errors"][0]["loc"] == ["query", "event"]


def test_a_class_error_answers_with_its_status(client):
    c = TestClient(client.app, client=LOCAL)
    c.get("/")  # the session cookie, as a browser gets it
    assert "there is no class" in api_error(c.get("/api/classes/ZZZZZZ"), 404, "no_class")
    assert "No such class" in page_error(c.get("/c/ZZZZZZ", headers=BROWSER), 404)
    code = c.post("/api/classes", json={}).json()["code"]
    other = TestClient(client.app, client=LOCAL)
    other.get("/")
    api_error(other.delete(f"/api/classes/{code}"), 403, "not_the_teacher")
    api_error(c.put(f"/api/classes/{code}/view", content=b"[]"), 422, "invalid")
    c.delete(f"/api/classes/{code}")


def test_a_missing_token_is_401_with_its_challenge(tiny_dir, settings):
    with TestClient(create_app(settings(token="s3cret"), scenarios_dir=tiny_dir),
                    client=LOCAL) as c:
        response = c.post("/api/classes", json={})
        assert "Authorization: Bearer" in api_error(response, 401, "token_needed")
        assert response.headers["www-authenticate"] == "Bearer"


def test_the_guards_answer_in_the_same_shape(client):
    detail = api_error(client.get("/api/scenarios", headers={"Host": "evil.example"}), 400,
                       "unknown_host")
    assert "ALLOWED_HOSTS" in detail
    api_error(client.post("/api/classes", headers={"Sec-Fetch-Site": "cross-site"}), 403,
              "cross_site")


def test_no_router_raises_anything_but_app_error():
    users = [p.name for p in sorted(ROUTERS.glob("*.py")) if "HTTPException" in p.read_text()]
    assert users == []
