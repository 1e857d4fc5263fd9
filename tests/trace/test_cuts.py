"""Where a script cut the gradient on purpose: a node that read a parameter's values without an
edge from it. The graph records it, and the drawing shows it dashed."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from app.render import render_graph
from tests.trace_facts import backward_events, param_node

SCRIPT = """
import sys
import torch
import torch.nn.functional as F
from torch import nn
torch.manual_seed(0)
lin = nn.Linear(3, 3)
x = torch.randn(2, 3)
h = torch.tanh(lin(x))
how = sys.argv[1]
if how == "detach":
    out = F.linear(h, lin.weight.detach(), lin.bias.detach())
elif how == "view_earlier":
    wt = lin.weight.t()      # a view made on one line...
    out = h @ wt + lin.bias  # ...used on another: still an edge, not a cut
elif how == "requires_grad":
    lin.requires_grad_(False)
    out = lin(h)
    lin.requires_grad_(True)
else:
    out = lin(h)
out.sum().backward()
"""


@pytest.mark.parametrize("how, label, line", [("detach", "detach()", 12),
                                               ("requires_grad", "requires_grad_(False)", 17)])
def test_the_cut_is_recorded_with_how_and_where(trace_source, how, label, line):
    doc = trace_source(SCRIPT, argv=[how])
    (event,) = backward_events(doc)
    weight = param_node(event, "weight")
    (cut,) = event["graph"]["cuts"]
    assert cut["param"] == "weight" and cut["source"] == weight["id"]
    assert (cut["how"], cut["line"]) == (label, line)
    second_use = next(n for n in event["graph"]["nodes"] if n["id"] == cut["node"])
    assert any(s.get("param") == "weight" for s in second_use["saved"])
    # no real edge joins them: the weight's only use is the first one
    assert event["uses"]["weight"] == 1
    assert not [e for e in event["graph"]["edges"]
                if e["source"] == weight["id"] and e["target"] == cut["node"]]
    svg = ET.fromstring(render_graph(event["graph"], "svg"))
    ids = {g.get("id") for g in svg.iter("{http://www.w3.org/2000/svg}g")}
    assert f"cut-{weight['id']}-{cut['node']}" in ids


@pytest.mark.parametrize("how", ["both", "view_earlier"])
def test_real_uses_are_not_cuts(trace_source, how):
    doc = trace_source(SCRIPT, argv=[how])
    (event,) = backward_events(doc)
    assert event["graph"]["cuts"] == []
    assert event["uses"]["weight"] == 2


def test_a_model_moved_to_a_device_is_not_said_to_be_read_under_no_grad(trace_source):
    """`.to(device)` copies parameters under torch's own no_grad (Module._apply): a layer left
    out of the loss is unreached, not read under no_grad at the `.to` line (found on PyTorch's
    model-ensembling tutorial: 60 such warnings). A layer the script itself reads only under
    no_grad is still said to be, with its line."""
    doc = trace_source("import torch\nfrom torch import nn\n"
                       "enc = nn.Linear(2, 2).to('cpu'); head = nn.Linear(2, 1)\n"
                       "probe = nn.Linear(2, 1)\nx = torch.randn(1, 2)\nunused = enc(x)\n"
                       "with torch.no_grad():\n    peek = probe(x)\n"
                       "head(x).sum().backward()\n")
    said = {d["params"][0]: d["message"] for d in doc["diagnostics"]
            if d["code"] == "no_gradient"}
    assert "enc.weight" in said and "no_grad" not in said["enc.weight"], said
    assert "line 3" not in said["enc.weight"]
    assert "no_grad" in said["probe.weight"] and "line 8" in said["probe.weight"], said
