"""POST /api/runs and the stored runs, in process against the app, with the real runner.

Every run is a real sandboxed worker, so the module keeps a pool of two ready and shares each
run between the tests that read it. The forum-style scripts are pasted as people write them;
each test checks what PyTorch itself says (a gradient worked out by hand, or the sum of the
per-use contributions) against the Trace the API returns.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.web.app import create_app
from tests.web.conftest import LOCAL

FORUM_LOOP = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)

for epoch in range(3):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    print(epoch, loss.item())
"""

NON_SCALAR = """\
import torch

w = torch.nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
x = torch.tensor([1.0, -1.0])
y = w @ x  # a vector: backward needs the gradient of something with respect to it
y.backward(torch.tensor([1.0, 0.5]))
"""

AUTOGRAD_GRAD = """\
import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = (x ** 3).sum()
(dy_dx,) = torch.autograd.grad(y, x)
print(dy_dx)
"""

NUMPY_FUNCTION = """\
import numpy as np
import torch


class NumpyExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = torch.from_numpy(np.exp(x.detach().numpy()))
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        return grad * result


w = torch.nn.Parameter(torch.tensor([0.0, 1.0]))
loss = NumpyExp.apply(w * 2).sum()
loss.backward()
"""

VARIABLE = """\
import torch
from torch.autograd import Variable

x = Variable(torch.ones(2, 2), requires_grad=True)
y = x + 2
z = (y * y * 3).mean()
z.backward()
"""

SYNTAX_ERROR = "import torch\n\nw = torch.ones(2, requires_grad=True)\nloss = (w * 2).sum(\n"


@pytest.fixture(scope="module")
def runs(settings):
    """A client over an app with a pool of ready workers, and its settings."""
    s = settings(pool_size=2)
    with TestClient(create_app(s), client=LOCAL) as c:
        yield c, s


@pytest.fixture(scope="module")
def client_(runs):
    return runs[0]


_done: dict[str, dict] = {}


# what the app's own page sends with a form post (TestClient names its host "testserver")
PAGE = {"Origin": "http://testserver"}

def post(client, source: str, **fields) -> dict:
    """POST a script as JSON once per module; the 200 response body."""
    key = json.dumps([source, fields], sort_keys=True)
    if key not in _done:
        response = client.post("/api/runs", json={"source": source, **fields})
        assert response.status_code == 200, response.text
        _done[key] = response.json()
    return _done[key]


def values(summary: dict) -> np.ndarray:
    return np.array(summary["values"], dtype=float)


def contributions_sum(event: dict, param: str) -> np.ndarray:
    return sum(values(c["grad"]) for c in event["contributions"][param])


def backwards(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "backward"]


# ---- uploads, ids, links ---------------------------------------------------------------------


def test_json_upload_returns_the_trace_with_its_id_and_link(client_):
    doc = post(client_, FORUM_LOOP, name="forum.py")
    assert doc["format"] == "autograd-lab/trace@1"
    assert doc["script"]["name"] == "forum.py" and doc["script"]["source"] == FORUM_LOOP
    run_id = doc["run"]["id"]
    assert doc["run"]["link"] == f"/runs/{run_id}"
    stored = client_.get(f"/api/runs/{run_id}").json()
    assert stored == doc  # the JSON twin of the page is what the upload returned
    page = client_.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "<code>forum.py</code>" in page.text
    assert '<span class="tok-keyword">for</span> epoch' in page.text  # the run's own source
    assert 'id="controls"' not in page.text  # no variants, options or device to change
    data = json.loads(page.text.split('id="page-data">')[1].split("</script>")[0])
    assert data["run"] == {"id": run_id, "name": "forum.py", "device": "cpu",
                           "link": f"/runs/{run_id}"}


def test_multipart_upload_of_a_file(client_):
    response = client_.post("/api/runs", files={"file": ("non_scalar.py", NON_SCALAR.encode())},
                            data={"device": "cpu"}, headers=PAGE)
    assert response.status_code == 200, response.text
    doc = response.json()
    _done[json.dumps([NON_SCALAR, {}], sort_keys=True)] = doc
    assert doc["script"]["name"] == "non_scalar.py" and doc["script"]["source"] == NON_SCALAR
    assert client_.get(doc["run"]["link"]).status_code == 200


def test_graph_drawings_of_a_stored_run_share_the_trace_ids(client_):
    doc = post(client_, FORUM_LOOP, name="forum.py")
    run_id = doc["run"]["id"]
    second = backwards(doc)[1]
    svg = client_.get(f"/api/runs/{run_id}/graph.svg?event={second['index']}")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    for node in second["graph"]["nodes"]:
        assert f'id="{node["id"]}"' in svg.text, node["id"]
    dot = client_.get(f"/api/runs/{run_id}/graph.dot")
    assert dot.status_code == 200 and "digraph" in dot.text
    assert client_.get(f"/api/runs/{run_id}/graph.gif").status_code == 404
    assert client_.get(f"/api/runs/{run_id}/graph.svg?event=99").status_code == 404


def test_unknown_run_is_404_with_a_sentence(client_):
    for url in ("/api/runs/nope", "/api/runs/nope/graph.svg"):
        response = client_.get(url)
        assert response.status_code == 404
        assert "no run 'nope'" in response.json()["detail"]
    page = client_.get("/runs/nope")  # a page: the error page (error_handler.py)
    assert page.status_code == 404 and "no run &#39;nope&#39;" in page.text


def test_store_survives_a_restart(runs):
    client, settings = runs
    doc = post(client, FORUM_LOOP, name="forum.py")
    # a new server over the same store file (no pool: it only reads)
    again = create_app(dataclasses.replace(settings, pool_size=0))
    with TestClient(again, client=LOCAL) as c:
        assert c.get(f"/api/runs/{doc['run']['id']}").json() == doc


# ---- bad input: a clear answer, nothing run --------------------------------------------------


def test_oversized_script_is_413(client_):
    big = "# filler\n" * (66 * 1024 // 9)
    assert len(big.encode()) > 65 * 1024
    response = client_.post("/api/runs", json={"source": big})
    assert response.status_code == 413
    assert "64 KiB" in response.json()["detail"]
    response = client_.post("/api/runs", files={"file": ("big.py", big.encode())}, headers=PAGE)
    assert response.status_code == 413
    # a body far past any script's or notebook's size (4 MiB as saved, its outputs included)
    # is refused before it is read to the end
    response = client_.post("/api/runs", content=b"x" * (9 * 1024 * 1024),
                            headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "a script may be 64 KiB, a notebook 4 MiB" in response.json()["detail"]


@pytest.mark.parametrize("kwargs, words", [
    ({"json": {"source": "   \n"}}, "the script is empty"),
    ({"content": b"{not json", "headers": {"content-type": "application/json"}}, "not valid JSON"),
    ({"json": ["import torch"]}, '"source"'),
    ({"json": {"source": "x = 1", "device": "tpu"}}, "unknown device 'tpu'"),
    ({"files": {"other": ("a.py", b"x = 1")}}, "form field 'file'"),
    ({"data": {"file": "x = 1"}, "files": {"device": (None, b"cpu")}}, "form field 'file'"),
    ({"files": {"file": ("a.py", b"\xff\xfe\x00")}}, "not UTF-8"),
])
def test_bad_input_is_422_with_what_to_send(client_, kwargs, words):
    headers = {**kwargs.pop("headers", {}), **PAGE}
    response = client_.post("/api/runs", **kwargs, headers=headers)
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]


def test_other_content_types_are_415(client_):
    response = client_.post("/api/runs", content=b"import torch",
                            headers={"content-type": "text/x-python", **PAGE})
    assert response.status_code == 415
    assert "multipart" in response.json()["detail"]


def test_a_device_this_machine_lacks_is_422_naming_it(client_):
    # one past the GPUs this machine has: cuda:0 where there are none (CI), cuda:1 beside one
    gpus = sum(d.startswith("cuda") for d in client_.get("/api/devices").json()["devices"])
    device = f"cuda:{gpus}"
    response = client_.post("/api/runs", json={"source": "import torch\n", "device": device})
    assert response.status_code == 422
    assert f"{device!r}" in response.json()["detail"]
    assert ("is not available" if gpus == 0 else "does not exist") in response.json()["detail"]


def test_a_run_on_cuda_runs_there_in_the_sandbox(client_):
    """The worker's sandbox lets a script reach the GPU it was asked to use: its tensors, and
    the .grad PyTorch left, are on that device (needs a CUDA GPU; skipped without one)."""
    if not any(d.startswith("cuda") for d in client_.get("/api/devices").json()["devices"]):
        pytest.skip("this machine has no CUDA GPU")
    doc = post(client_, "import torch\nx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\n"
                        "(x ** 3).sum().backward()\n", device="cuda")
    assert doc["error"] is None and doc["device"] == "cuda"
    assert doc["params"]["x"]["device"] == "cuda:0"
    assert doc["params"]["x"]["grad"]["values"] == [3.0, 12.0, 27.0]  # d(x^3)/dx = 3x^2


def test_a_syntax_error_is_a_trace_whose_error_has_the_line(client_):
    doc = post(client_, SYNTAX_ERROR)
    assert doc["error"]["type"] == "SyntaxError"
    assert doc["error"]["line"] == 4
    assert "never closed" in doc["error"]["message"]
    assert doc["events"] == [] and doc["run"]["link"]  # kept, so its link shows the error too


# ---- ordinary scripts work as they are (issue 5) ---------------------------------------------


def test_model_loss_optimizer_loop_at_top_level(client_):
    doc = post(client_, FORUM_LOOP, name="forum.py")
    assert doc["error"] is None
    assert [e["kind"] for e in doc["events"]] == ["backward", "step"] * 3
    names = {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert set(doc["params"]) == names
    for name in names:
        assert doc["params"][name]["uses"] == {"0": 1, "2": 1, "4": 1}
    for event in backwards(doc):
        assert event["line"] == 13 and event["uses"] == dict.fromkeys(names, 1)
        for name in names:  # zero_grad() each epoch: .grad is exactly this pass's sum
            after = values(event["grads"][name]["after"])
            assert np.allclose(contributions_sum(event, name), after, atol=1e-6)
    for step in (e for e in doc["events"] if e["kind"] == "step"):
        assert step["optimizer"] == "SGD" and step["lr"] == [0.1]
        for p in step["params"].values():  # SGD: w <- w - lr * grad
            expected = values(p["before"]) - 0.1 * values(p["grad"])
            assert np.allclose(values(p["after"]), expected, atol=1e-6)
    assert doc["stdout"].count("\n") == 3


def test_backward_with_a_gradient_on_a_non_scalar_output(client_):
    doc = post(client_, NON_SCALAR)
    assert doc["error"] is None
    (event,) = backwards(doc)
    assert event["uses"] == {"w": 1}
    # d(v . (w x))/dw = outer(v, x)
    expected = np.outer([1.0, 0.5], [1.0, -1.0])
    assert np.allclose(values(doc["params"]["w"]["grad"]), expected)
    assert np.allclose(contributions_sum(event, "w"), expected)


def test_torch_autograd_grad_returns_without_touching_dot_grad(client_):
    doc = post(client_, AUTOGRAD_GRAD)
    assert doc["error"] is None
    (event,) = backwards(doc)
    assert event["call"] == "torch.autograd.grad" and event["line"] == 5
    assert np.allclose(values(event["results"][0]), [3.0, 12.0, 27.0])  # 3 x^2
    assert np.allclose(contributions_sum(event, "x"), [3.0, 12.0, 27.0])
    assert doc["params"]["x"]["grad"] is None  # autograd.grad accumulates nothing


def test_custom_function_with_a_numpy_forward(client_):
    doc = post(client_, NUMPY_FUNCTION)
    assert doc["error"] is None
    (event,) = backwards(doc)
    custom = [n for n in event["graph"]["nodes"] if n["kind"] == "custom"]
    assert [n["name"] for n in custom] == ["NumpyExpBackward"]
    expected = [2 * math.exp(0.0), 2 * math.exp(2.0)]  # d/dw sum(exp(2w)) = 2 exp(2w)
    assert np.allclose(values(doc["params"]["w"]["grad"]), expected, rtol=1e-6)
    assert np.allclose(contributions_sum(event, "w"), expected, rtol=1e-6)


def test_deprecated_variable_still_works(client_):
    doc = post(client_, VARIABLE)
    assert doc["error"] is None
    (event,) = backwards(doc)
    assert event["uses"] == {"x": 1}
    # the old tutorial's answer: d/dx mean(3 (x+2)^2) = 6 (x+2) / 4 = 4.5
    assert np.allclose(values(doc["params"]["x"]["grad"]), np.full((2, 2), 4.5))


def test_upload_policy_twin_of_the_page(client_):
    body = client_.get("/api/uploads").json()
    assert body["accepts"] is True and body["refused"] is None
    assert body["token_required"] is False and body["max_upload_bytes"] == 64 * 1024
    assert body["max_notebook_bytes"] == 4 * 1024 * 1024  # as saved: its code is held to 64 KiB
    assert body["sandbox"]["state"] == "off"  # this test app skips the self-test
    health = client_.get("/healthz").json()
    assert health["status"] == "ok" and health["sandbox"] == body["sandbox"]


@pytest.mark.parametrize("headers, allowed", [
    ({}, False),                                           # a program's form post, no token
    (PAGE, True),                                          # the app's own page
    ({"Sec-Fetch-Site": "same-origin"}, True),
    ({"Sec-Fetch-Site": "cross-site"}, False),             # another site's page (no-cors)
    ({"Sec-Fetch-Site": "same-site"}, False),              # a sibling subdomain is another app
    ({"Origin": "http://evil.example"}, False),
    ({"Origin": "http://testserver.evil.example"}, False),  # compared in full, not by prefix
    ({"Origin": "null"}, False),                           # a sandboxed frame
])
def test_a_form_post_must_come_from_the_app_s_own_pages(client_, headers, allowed):
    response = client_.post("/api/runs", files={"file": ("a.py", b" ")}, headers=headers)
    # allowed in: the empty script is refused after the checks (422), so no worker starts
    assert response.status_code == (422 if allowed else 403), response.text
    if not allowed:
        assert "page" in response.json()["detail"]


def test_json_from_another_site_is_refused_too(client_):
    response = client_.post("/api/runs", json={"source": " "},
                            headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
