"""An app per test module, over a scenarios folder the tests control, and one over the real
scenarios. Requests go through FastAPI's TestClient (httpx), in process; runs still happen in a
worker process, as in production, so the few tests that trace share each run through the cache.

`settings()` is how a test makes its app: the run store in a temporary folder (never the
user's home), no pool of pre-started workers and no sandbox self-test unless a test asks, so
that an in-process app starts no process it does not need."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.web.app import create_app
from app.web.settings import Settings

# A small scenario with both a variant and an option, so that every rule of the API has
# something to bite on without depending on the teaching scenarios' details.
TINY = '''\
"""A linear layer used twice

Question: does the weight get two gradient terms?

Answer: yes, one per use, summed into `.grad`.
"""

import argparse

import torch

VARIANTS = {"twice": "the layer applied twice", "once": "the layer applied once"}
OPTIONS = {"scale": {"default": 1, "choices": [1, 2], "help": "multiply the loss"}}

parser = argparse.ArgumentParser()
parser.add_argument("--variant", default="twice", choices=list(VARIANTS))
parser.add_argument("--scale", type=int, default=1, choices=[1, 2])
args = parser.parse_args()

torch.manual_seed(0)
layer = torch.nn.Linear(3, 3)
x = torch.randn(2, 3)
h = layer(x)
if args.variant == "twice":
    h = layer(h)
loss = h.pow(2).sum() * args.scale
loss.backward()
'''


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("scenarios")
    (folder / "tiny.py").write_text(textwrap.dedent(TINY), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    """settings(**changes) -> Settings for a test app, with its own store file."""
    def make(**changes) -> Settings:
        # TestClient's requests name the host "testserver"
        # scenarios are traced when a test asks, not all at start (warm_scenarios: their tests)
        values = {"trace_timeout": 120, "pool_size": 0, "selftest": False, "warm_scenarios": False,
                  "allowed_hosts": "testserver",
                  "store_path": str(tmp_path_factory.mktemp("store") / "runs.sqlite3")}
        return Settings(**{**values, **changes})

    return make


# TestClient's default client address is "testclient"; the app tells loopback visitors from
# others, and these tests are the server's own machine
LOCAL = ("127.0.0.1", 50000)


@pytest.fixture(scope="module")
def client(tiny_dir, settings) -> TestClient:
    app = create_app(settings(), scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as c:
        yield c


@pytest.fixture(scope="module")
def real_client(settings) -> TestClient:
    with TestClient(create_app(settings()), client=LOCAL) as c:
        yield c
