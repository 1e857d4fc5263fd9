"""An app per test module, over a scenarios folder the tests control, and one over the real
scenarios. Requests go through FastAPI's TestClient (httpx), in process; runs still happen in a
worker process, as in production, so the few tests that trace share each run through the cache."""

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
def client(tiny_dir) -> TestClient:
    app = create_app(Settings(trace_timeout=120), scenarios_dir=tiny_dir)
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def real_client() -> TestClient:
    with TestClient(create_app(Settings(trace_timeout=120))) as c:
        yield c
