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
