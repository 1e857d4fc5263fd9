"""`autograd_lab.show` of a stored run, fetched from a real server on loopback (issue 22): the
kernel gets the run's Trace as the server keeps it, checked like a worker's report, with the
run page's address; a wrong address is a clear error."""

from __future__ import annotations

import httpx
import pytest
import torch

import autograd_lab
from autograd_lab.api import SERVER_ENV
from tests.server import serve
from tests.trace_facts import backward_events, contribution_sum, values

SCRIPT = """\
import torch
torch.manual_seed(0)
layer = torch.nn.Linear(3, 3)
x = torch.randn(4, 3)
out = layer(torch.tanh(layer(x)))  # the same layer, used twice
out.pow(2).sum().backward()
"""


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """(server base URL, a stored run's id)."""
    with serve(tmp_path_factory.mktemp("store"), name="notebook-fetch") as base:
        answer = httpx.post(f"{base}/api/runs?wait=true", json={"source": SCRIPT,
                                                               "name": "reused.py"},
                            timeout=120)
        answer.raise_for_status()
        body = answer.json()
        yield base, body.get("id") or body["run"]["id"]


def test_show_of_a_run_page_address_brings_its_trace(stored):
    base, run_id = stored
    shown = autograd_lab.show(f"{base}/runs/{run_id}")
    served = httpx.get(f"{base}/api/runs/{run_id}", timeout=60).json()
    assert shown.trace == served and shown.link == f"{base}/runs/{run_id}"
    (event,) = backward_events(shown.trace)
    # the fact PyTorch confirms, from the fetched document: the two uses sum to .grad
    for name in ("weight", "bias"):  # the one model's parameters, named as on its page
        assert len(event["contributions"][name]) == 2
        assert torch.allclose(contribution_sum(event, name),
                              values(shown.trace["params"][name]["grad"]), atol=1e-6)
    bundle = shown._repr_mimebundle_()
    assert f"{base}/runs/{run_id}" in bundle["text/html"]  # the way back to the run's page
    assert "<svg" in bundle["image/svg+xml"]


def test_show_of_an_id_with_the_server_named(stored, monkeypatch):
    base, run_id = stored
    assert autograd_lab.show(run_id, server=base).trace["script"]["source"] == SCRIPT
    monkeypatch.setenv(SERVER_ENV, base)
    assert autograd_lab.show(f"{base}/api/runs/{run_id}").link == f"{base}/runs/{run_id}"
    assert autograd_lab.show(run_id).trace["script"]["name"] == "reused.py"


def test_a_run_the_server_does_not_have_is_a_clear_error(stored):
    base, _ = stored
    with pytest.raises(ValueError, match=r"answered 404"):
        autograd_lab.show("NoSuchRun123", server=base)
    with pytest.raises(ValueError, match=r"could not reach the autograd-lab server"):
        autograd_lab.show("abc", server="http://127.0.0.1:9")  # nothing listens there
