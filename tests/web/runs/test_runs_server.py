"""Token, 413 and 503 against a real uvicorn on loopback (issue 5), and after each, the server
still answers /healthz and still runs a normal script.

One server for the module: a token, one worker and no queue (so a second run while one is
going is turned away), one ready worker in the pool, and the sandbox self-test on, as served.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.server import serve

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
SLOW = "import time\nimport torch\ntime.sleep(6)\nw = torch.ones(2, requires_grad=True)\n" \
       "(2 * w).sum().backward()\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="runs-server", TOKEN=TOKEN,
               MAX_DRAWINGS="1", UPLOAD_WORKERS="1", QUEUE_SIZE="0", POOL_SIZE="1",
               TRACE_TIMEOUT="60") as url:
        yield url


def run(base: str, source: str = SMALL, headers=AUTH) -> httpx.Response:
    return httpx.post(base + "/api/runs", json={"source": source}, headers=headers, timeout=90)


def still_serving(base: str) -> None:
    """/healthz answers and a normal script runs to a full trace."""
    health = httpx.get(base + "/healthz", timeout=5)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    response = run(base)
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["error"] is None and doc["params"]["w"]["uses"] == {"0": 2}  # w * w: two uses
    assert httpx.get(base + doc["run"]["link"], timeout=5).status_code == 200


def test_the_token_is_required_when_configured(base):
    response = run(base, headers={})
    assert response.status_code == 401 and "Bearer" in response.json()["detail"]
    assert run(base, headers={"Authorization": "Bearer nope"}).status_code == 401
    still_serving(base)  # with the right token: 200 and a trace


def test_an_oversized_body_is_413(base):
    # past what a script (64 KiB) or a notebook as saved (4 MiB, outputs included) could take
    response = httpx.post(base + "/api/runs", content=b"x" * (9 * 1024 * 1024), headers={
        **AUTH, "content-type": "application/json"}, timeout=30)
    assert response.status_code == 413 and "KiB" in response.json()["detail"]
    script = "# " + "x" * (70 * 1024) + "\n"
    assert run(base, script).status_code == 413
    still_serving(base)


def test_a_full_queue_is_503_with_retry_after(base):
    slow: dict = {}
    thread = threading.Thread(target=lambda: slow.update(response=run(base, SLOW)))
    thread.start()
    try:
        # the slow run takes the only worker as soon as its request is read (well within 2 s
        # even on a loaded machine) and keeps it for the 6 s its script sleeps
        time.sleep(2.0)
        busy = run(base)
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"] == "5" and "try again" in busy.json()["detail"]
        assert httpx.get(base + "/healthz", timeout=5).status_code == 200  # during the run too
    finally:
        thread.join(60)
    assert slow["response"].status_code == 200
    assert slow["response"].json()["events"][0]["line"] == 5
    still_serving(base)


def self_test_report(base: str, patience: float) -> dict:
    """/healthz's sandbox once the start-up self-test is done (or `patience` s have passed)."""
    deadline = time.monotonic() + patience
    while True:
        sandbox = httpx.get(base + "/healthz", timeout=5).json()["sandbox"]
        if sandbox["state"] == "done" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return sandbox


def test_healthz_shows_the_sandbox_self_test(base):
    sandbox = self_test_report(base, 60)
    assert sandbox["state"] == "done", sandbox
    assert {"landlock", "namespaces", "rlimits", "supervisor"} <= set(sandbox["layers"])
    assert sandbox["summary"]
    assert sandbox["ok"] == (not sandbox["missing"] and not sandbox["failing"])


def test_a_root_server_forks_its_workers_from_the_fork_server(base):
    """Once the fork server is up (the self-test waits for it and says so), runs are forked
    from it, confined as an exec'd worker is: their own PID namespace (the worker is PID 1)
    and a uid of their own."""
    from app.runner import fork_server_supported

    supported, why = fork_server_supported()
    if not supported:
        pytest.skip(why)
    sandbox = self_test_report(base, 180)
    assert "fork server" in sandbox["layers"]["exec"]["detail"], sandbox["layers"]["exec"]
    forked = []
    for _ in range(3):  # the pool's first worker may have been exec'd before it was up
        doc = run(base).json()
        assert doc["error"] is None
        forked.append(doc["sandbox"]["forked"])
    assert forked[-1] is True, forked
    box = doc["sandbox"]
    assert box["pid"] == 1 and box["uid"] >= 3_000_000 and box["landlock"]["enforced"]


PLOT = """\
import matplotlib.pyplot as plt
import torch

w = torch.ones(3, requires_grad=True)
(w * w).sum().backward()
plt.bar(range(3), w.grad.tolist())
plt.show()
"""


def test_a_scripts_figure_is_served_as_a_png(base):
    """matplotlib is there for a pasted script, in the sandbox; its figure comes back with the
    run and is served as an image."""
    import io

    from PIL import Image

    doc = run(base, PLOT).json()
    assert doc["error"] is None, doc["error"]
    assert [(f["via"], f["line"]) for f in doc["figures"]] == [("show", 7)]
    png = httpx.get(f"{base}/api/runs/{doc['run']['id']}/figures/0.png", timeout=10)
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert "sandbox" in png.headers["content-security-policy"]
    assert Image.open(io.BytesIO(png.content)).size == (doc["figures"][0]["width"],
                                                        doc["figures"][0]["height"])
