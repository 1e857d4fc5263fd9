"""A script can write its own report in place of the worker's: each way of abusing that gets a
clear error (or, when the forgery keeps every rule, is shown as harmless text), the server's
memory stays bounded, other stored runs survive, and the next normal run works (issue 9,
points 3 and 4). Sent to a real server, as a stranger would."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
WRITE_AND_LEAVE = ("\nwith open('trace.json', 'w') as f:\n    f.write(report)\n"
                   "import os\nos._exit(0)\n")

VALID_FORGERY = {
    "format": "autograd-lab/trace@1",
    "script": {"name": "innocent.py", "source": "print('not what ran')",
               "sha256": "0" * 64, "args": []},
    "torch": "9.9", "device": "cpu", "stdout": "", "error": None, "params": {},
    "diagnostics": [], "sandbox": {"landlock": {"enforced": True}, "uid": 0, "forged": True},
    "events": [{"kind": "backward", "index": 0, "order": [], "uses": {}, "contributions": {},
                "grads": {}, "graph": {"roots": ["n0"], "edges": [
                    {"source": "n1", "target": "n0", "slot": 0}], "nodes": [
                    {"id": "n0", "name": 'end\\" URL="http://evil.example" x="\\', "kind": "op"},
                    {"id": "n1", "name": "w\\", "label": "w\\", "kind": "param",
                     "param": "w\\", "shape": [3]}]}}]}


FORGERY = repr(VALID_FORGERY)


def _rss_peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _server_pid(base: str) -> int:
    port = base.rsplit(":", 1)[1]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"uvicorn" in b" ".join(cmd) and port.encode() in cmd:
                return int(entry)
    raise LookupError("the test server's process was not found")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="forged-reports-server",
               MAX_DRAWINGS="1", UPLOAD_WORKERS="1",
               POOL_SIZE="1", TRACE_TIMEOUT="30", SELFTEST="false") as url:
        yield url


@pytest.fixture(scope="module")
def first_run(base):
    """A normal run stored before the forgeries: it must survive them."""
    response = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120)
    assert response.status_code == 200 and response.json()["error"] is None
    return response.json()["run"]["id"]


def post(base: str, source: str) -> dict:
    response = httpx.post(base + "/api/runs", json={"source": source}, timeout=180)
    assert response.status_code == 200, response.text
    assert len(response.content) < 64 * 1024, len(response.content)
    return response.json()


def _then_all_is_well(base: str, first_run: str) -> None:
    assert httpx.get(base + "/healthz", timeout=10).status_code == 200
    after = post(base, SMALL)
    assert after["error"] is None and after["params"]["w"]["uses"] == {"0": 2}
    assert httpx.get(f"{base}/api/runs/{first_run}", timeout=30).status_code == 200


CASES = {
    # 64 MiB of "[]," would be 22 million lists once parsed
    "64-mib-of-lists": ("report = '[' + '[],' * (64 * 2**20 // 3 - 1) + '[]]'",
                        "TraceTooLarge", "larger than the 32 MiB"),
    # under the size cap, over the count of lists and objects a report may hold
    "millions-of-lists": ("report = '[' + '[],' * 3_000_000 + '[]]'",
                          "WorkerFailed", "more than 2,000,000 lists and objects"),
    # under the size cap and the count of lists: millions of one-letter strings, or of zeros
    "millions-of-strings": ("report = '[' + '\"a\",' * 6_100_000 + '\"a\"]'",
                            "WorkerFailed", "more than 6,000,000 strings"),
    "millions-of-values": ("report = '[' + '0,' * 8_100_000 + '0]'",
                           "WorkerFailed", "more than 8,000,000 values"),
    "10000-deep": ("report = '{\"format\": \"autograd-lab/trace@1\", \"events\": ' + "
                   "'[' * 10_000 + ']' * 10_000 + '}'", "WorkerFailed", "nested too deeply"),
    "not-json": ("report = 'this is not json'", "WorkerFailed", "not JSON"),
    "bad-node-id": ("import json\nforged = " + FORGERY + "\nforged['events'][0]['graph']"
                    "['nodes'][0]['id'] = 'n0\" onclick=\"x'\nreport = json.dumps(forged)",
                    "WorkerFailed", "not a valid trace"),
    "a-huge-message": ("import json\nforged = " + FORGERY + "\nforged['error'] = {'type': 'X', "
                       "'message': 'm' * 10**6, 'line': 1}\nreport = json.dumps(forged)",
                       "WorkerFailed", "not a valid trace"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_forged_report_gets_a_clear_error(base, first_run, name):
    make, kind, words = CASES[name]
    pid = _server_pid(base)
    peak = _rss_peak_kib(pid)
    doc = post(base, make + WRITE_AND_LEAVE)
    assert doc["error"]["type"] == kind, doc["error"]
    assert words in doc["error"]["message"]
    assert doc["events"] == []  # nothing of the forged report is shown
    # the report was never parsed whole in the server: its peak memory grew by far less
    assert _rss_peak_kib(pid) - peak < 150 * 1024
    _then_all_is_well(base, first_run)


def test_a_forgery_that_keeps_every_rule_is_shown_as_harmless_text(base, first_run):
    source = "import json\nreport = json.dumps(" + FORGERY + ")" + WRITE_AND_LEAVE
    doc = post(base, source)
    # what the server knows better is the server's: the script it ran, the sandbox it set up
    assert doc["script"]["source"] == source and doc["script"]["name"] == "script.py"
    assert "forged" not in doc["sandbox"] and doc["sandbox"]["limits"]["memory_mb"] > 0
    svg = httpx.get(f"{base}/api/runs/{doc['run']['id']}/graph.svg", timeout=60)
    assert svg.status_code == 200
    assert b"href" not in svg.content and b"onclick" not in svg.content
    assert b"URL=&quot;http://evil.example&quot;" in svg.content  # drawn, as text
    _then_all_is_well(base, first_run)


def test_endless_recursion_answers_in_a_few_kilobytes(base, first_run):
    doc = post(base, "import sys\nsys.setrecursionlimit(10**6)\n"
                     "def f(n):\n    return f(n + 1)\nf(0)\n")
    assert doc["error"]["type"] == "RecursionError", doc["error"]
    assert doc["error"]["frames"][-1]["repeated"] > 900_000  # a million calls, four frames
    assert len(json.dumps(doc)) < 64 * 1024
    _then_all_is_well(base, first_run)


def test_names_that_are_not_valid_unicode_are_shown_not_a_500(base, first_run):
    """A script may name a tensor with a lone surrogate; a forged report may put one anywhere.
    Either is mended when the report is read: the run page and its drawing still answer."""
    doc = post(base, 'import torch\nglobals()["w\\udc80"] = torch.ones(2, requires_grad=True)\n'
                     'loss = (globals()["w\\udc80"] * 2).sum()\nloss.backward()\n')
    assert doc["error"] is None
    run = doc["run"]["id"]
    assert httpx.get(f"{base}/runs/{run}", timeout=30).status_code == 200
    assert httpx.get(f"{base}/api/runs/{run}/graph.svg", timeout=60).status_code == 200
    forged = post(base, "import json\nforged = " + FORGERY + "\nforged['torch'] = '\\udc80'\n"
                  "report = json.dumps(forged)" + WRITE_AND_LEAVE)
    assert httpx.get(f"{base}/runs/{forged['run']['id']}", timeout=30).status_code == 200
    _then_all_is_well(base, first_run)


def _refused(doc: dict) -> list[str]:
    return [d["message"] for d in doc["diagnostics"] if d["code"] == "figure_refused"]


def test_a_forged_figure_that_is_not_a_png_is_not_kept(base, first_run):
    """A report's figure is the script's to write: base64 of an HTML page passes the schema
    (it is base64) but is taken out as the report comes in, with a diagnostic saying why."""
    import base64

    html = base64.b64encode(b"<html><script>alert(1)</script></html>").decode()
    doc = post(base, "import json\nforged = " + FORGERY + "\nforged['figures'] = [{'index': 0, "
               f"'via': 'show', 'line': 1, 'width': 10, 'height': 10, 'png': '{html}'}}]\n"
               "report = json.dumps(forged)" + WRITE_AND_LEAVE)
    assert doc["figures"] == []
    assert _refused(doc) == ["Figure 1 is not shown: it is not a PNG image. A figure made with "
                             "matplotlib is always shown; this one was written some other way."]
    assert httpx.get(f"{base}/api/runs/{doc['run']['id']}/figures/0.png",
                     timeout=10).status_code == 404
    _then_all_is_well(base, first_run)


# a real PNG (it decodes) of 20,000 x 20,000 one-bit pixels, about 60 KB compressed, declared
# as 640 x 480: the decompression bomb of issue 38; and a true 8 x 8 one beside it
BOMB = r"""
import base64, json, struct, zlib
def png(width, height):
    def chunk(kind, data):
        crc = struct.pack('>I', zlib.crc32(kind + data))
        return struct.pack('>I', len(data)) + kind + data + crc
    rows = zlib.compress((b'\0' * (1 + (width + 7) // 8)) * height, 9)
    head = struct.pack('>IIBBBBB', width, height, 1, 0, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', head) + chunk(b'IDAT', rows)
            + chunk(b'IEND', b''))
def figure(i, data, width, height):
    return {'index': i, 'via': 'show', 'line': 1, 'width': width, 'height': height,
            'png': base64.b64encode(data).decode()}
"""


def test_a_figure_bigger_than_it_declares_is_not_kept_and_a_true_one_is(base, first_run):
    from PIL import Image

    doc = post(base, BOMB + "forged = " + FORGERY + "\nforged['figures'] = "
               "[figure(0, png(20000, 20000), 640, 480), figure(1, png(8, 8), 8, 8)]\n"
               "report = json.dumps(forged)" + WRITE_AND_LEAVE)
    assert _refused(doc) == ["Figure 1 is not shown: it is 20000 x 20000 pixels, past the "
                             "2000 x 2000 a figure may be. A figure made with matplotlib is "
                             "always shown; this one was written some other way."]
    assert [(f["index"], f["width"], f["height"]) for f in doc["figures"]] == [(0, 8, 8)]
    kept = httpx.get(f"{base}/api/runs/{doc['run']['id']}/figures/0.png", timeout=10)
    assert kept.status_code == 200
    import io

    assert Image.open(io.BytesIO(kept.content)).size == (8, 8)  # Pillow reads what we served
    _then_all_is_well(base, first_run)


def test_a_forged_view_is_drawn_as_text_and_a_missing_one_is_a_clear_404(base, first_run):
    """A report's make_dot views are the script's to write too: their names reach DOT (drawn
    as text, never a link) and the page (as text); a view that is not there is a clear 404."""
    view = {"index": 0, "kind": "make_dot", "call": "torchviz.make_dot", "line": 1,
            "event": None, "label": "<img src=x onerror=alert(1)>", "names": ["w\\"],
            "graph": VALID_FORGERY["events"][0]["graph"]}
    doc = post(base, "import json\nforged = " + FORGERY + f"\nforged['views'] = [{view!r}]\n"
               "report = json.dumps(forged)" + WRITE_AND_LEAVE)
    run = doc["run"]["id"]
    assert doc["views"][0]["label"] == view["label"]  # kept as the text it is
    svg = httpx.get(f"{base}/api/runs/{run}/graph.svg?view=0", timeout=60)
    assert svg.status_code == 200 and svg.headers["content-security-policy"].startswith(
        "default-src 'none'")
    assert b"href" not in svg.content and b"onclick" not in svg.content
    assert b"URL=&quot;http://evil.example&quot;" in svg.content
    missing = httpx.get(f"{base}/api/runs/{run}/graph.svg?view=1", timeout=10)
    assert missing.status_code == 404 and "1 view(s)" in missing.json()["detail"]
    _then_all_is_well(base, first_run)


def test_forged_module_paths_are_grouped_within_bounds(base, first_run):
    """Module paths are the script's to write: 20,000 nodes with 100-level paths are grouped
    (cut at 16 levels) and drawn by module with the server's memory bounded."""
    make = ("import json\nforged = " + FORGERY + "\ng = forged['events'][0]['graph']\n"
            "g['nodes'] = [{'id': 'n%d' % i, 'name': 'MulBackward0', 'kind': 'op', "
            "'module': 'deep.' * 100 + str(i % 7)} for i in range(20000)]\n"
            "g['edges'] = [{'source': 'n%d' % (i + 1), 'target': 'n%d' % i, 'slot': 0} "
            "for i in range(19999)]\ng['roots'] = ['n0']\nreport = json.dumps(forged)")
    pid = _server_pid(base)
    peak = _rss_peak_kib(pid)
    # the report is larger than post() allows an answer to be: read it by its parts
    response = httpx.post(base + "/api/runs", json={"source": make + WRITE_AND_LEAVE},
                          timeout=180)
    assert response.status_code == 200
    run = response.json()["run"]["id"]
    layout = httpx.get(f"{base}/api/runs/{run}/graph.json", timeout=120).json()
    assert not layout["grouping"]["flat"] and layout["flat_nodes"] == 20000
    assert layout["nodes"] <= 300
    assert all(unit["path"].count(".") < 16 for unit in layout["units"])
    svg = httpx.get(f"{base}/api/runs/{run}/graph.svg", timeout=120)
    assert svg.status_code == 200 and b"href" not in svg.content
    assert _rss_peak_kib(pid) - peak < 400 * 1024
    _then_all_is_well(base, first_run)
