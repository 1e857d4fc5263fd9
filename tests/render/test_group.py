"""A big graph drawn by module (app/render/group.py), checked against the flat graph it came
from: which flat nodes a unit holds is worked out here from the unit's path and the nodes'
modules, not from the grouping code, and every flat edge between two units must be drawn."""

from __future__ import annotations

from collections import Counter

import pytest

from app.render import render_graph
from app.render.group import FLAT, Grouping, choose_grouping, group_graph, readable_grouping
from tests.trace_facts import backward_events

ENCODER = """
import torch
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0)
model = nn.TransformerEncoder(layer, num_layers={layers}, enable_nested_tensor=False)
model(torch.randn(5, 2, 16, requires_grad=True)).pow(2).mean().backward()
"""

BLOCKS = """
import torch
from torch import nn
torch.manual_seed(0)
blocks = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range({n})])
blocks(torch.randn(4, 8, requires_grad=True)).sum().backward()
"""


@pytest.fixture(scope="module")
def encoder_graph(tmp_path_factory):
    from app.trace.tracer import trace_script

    path = tmp_path_factory.mktemp("encoder") / "encoder.py"
    path.write_text(ENCODER.format(layers=6))
    return backward_events(trace_script(path))[0]["graph"]


def members(unit: dict, graph: dict) -> set[str]:
    """The flat nodes a unit holds, from its path alone."""
    out = set()
    for node in graph["nodes"]:
        module = node.get("module") or ""
        if unit["kind"] == "module":
            inside = module == unit["path"] or module.startswith(unit["path"] + ".")
        else:
            parent = unit["path"].rsplit(".", 1)[0] if "." in unit["path"] else ""
            first, last = (int(x) for x in unit["path"].rsplit(".", 1)[-1].split("-"))
            rest = module[len(parent) + 1:] if parent else module
            number = rest.split(".", 1)[0]
            inside = (module.startswith(parent + ".") or not parent) and number.isdigit() \
                and first <= int(number) <= last
        if inside:
            out.add(node["id"])
    return out


GROUPINGS = [Grouping(depth=d) for d in (1, 2, 3, 4)] + [
    Grouping(depth=None), Grouping(depth=3, fold=False), Grouping(depth=2, opened=frozenset(
        {"model.layers"}))]


@pytest.mark.parametrize("grouping", GROUPINGS, ids=str)
def test_grouping_keeps_every_edge_between_groups(encoder_graph, grouping):
    flat = encoder_graph
    grouped = group_graph(flat, grouping)
    owner: dict[str, str] = {}
    for unit in grouped["nodes"]:
        if unit["kind"] in ("module", "fold"):
            for member in members(unit, flat):
                assert member not in owner, f"{member} is in two units"
                owner[member] = unit["id"]
        else:
            owner[unit["id"]] = unit["id"]
    # every flat node is drawn exactly once, as itself or inside one unit
    assert set(owner) == {n["id"] for n in flat["nodes"]}
    expected = Counter((owner[e["source"]], owner[e["target"]]) for e in flat["edges"]
                       if owner[e["source"]] != owner[e["target"]])
    drawn: Counter = Counter()
    for e in grouped["edges"]:
        drawn[(e["source"], e["target"])] += e["count"]
    assert drawn == expected  # none lost, none invented, each counted
    ids = [(e["source"], e["target"], e["slot"]) for e in grouped["edges"]]
    assert len(set(ids)) == len(ids)  # each drawn edge has an id of its own
    # an edge between two nodes drawn as they are keeps the Trace's own slot (the page's
    # replay finds it by id)
    flat_ids = {(e["source"], e["target"], e["slot"]) for e in flat["edges"]}
    for e in grouped["edges"]:
        if e["source"] in owner and owner[e["source"]] == e["source"] and \
                e["target"] in owner and owner[e["target"]] == e["target"] and \
                e["source"][0] in "no" and e["target"][0] in "no":
            assert (e["source"], e["target"], e["slot"]) in flat_ids


def test_a_unit_counts_its_ops_and_names_its_parameters(encoder_graph):
    grouped = group_graph(encoder_graph, Grouping(depth=3, fold=False))
    by_path = {n["path"]: n for n in grouped["nodes"] if n["kind"] == "module"}
    layer = by_path["model.layers.2"]
    inside = [n for n in encoder_graph["nodes"] if n["id"] in members(layer, encoder_graph)]
    assert layer["ops"] == sum(n["kind"] == "op" for n in inside) > 20
    assert sorted(layer["params"]) == sorted(
        n["param"] for n in inside if n["kind"] == "param")
    assert "model.layers.2.linear1.weight" in layer["params"]


def test_folding_identical_blocks_then_opening_them_gives_back_the_flat_graph(trace_source):
    flat = backward_events(trace_source(BLOCKS.format(n=9)))[0]["graph"]
    folded = group_graph(flat, Grouping(depth=None))
    [fold] = [n for n in folded["nodes"] if n["kind"] == "fold"]
    assert fold["repeat"] == 9 and fold["name"] == "0-8 × 9"
    assert fold["ops"] == sum(n["kind"] == "op" for n in flat["nodes"]
                              if (n.get("module") or "").split(".")[0].isdigit())
    # opening the fold shows the nine blocks, each closed
    opened = group_graph(flat, Grouping(depth=None, opened=frozenset({fold["path"]})))
    assert sorted(n["path"] for n in opened["nodes"] if n["kind"] == "module") == \
        [str(i) for i in range(9)]
    # and opening each block gives back the flat graph exactly
    everything = frozenset({fold["path"], *(str(i) for i in range(9))})
    again = group_graph(flat, Grouping(depth=None, opened=everything))
    assert [n["id"] for n in again["nodes"]] == [n["id"] for n in flat["nodes"]]
    assert sorted((e["source"], e["target"]) for e in again["edges"]) == \
        sorted((e["source"], e["target"]) for e in flat["edges"])


def test_blocks_that_differ_are_not_folded(trace_source):
    flat = backward_events(trace_source("""
import torch
from torch import nn
net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
net(torch.randn(2, 4, requires_grad=True)).sum().backward()
"""))[0]["graph"]
    folded = group_graph(flat, Grouping(depth=None))
    [fold] = [n for n in folded["nodes"] if n["kind"] == "fold"]
    assert fold["path"] == "0-1"  # the two Linears; the ReLU between breaks the run


def test_a_big_graph_opens_at_a_readable_depth(trace_source):
    flat = backward_events(trace_source(ENCODER.format(layers=12)))[0]["graph"]
    assert len(flat["nodes"]) > 300
    grouping = readable_grouping(flat)
    grouped = group_graph(flat, grouping)
    assert len(grouped["nodes"]) <= 300 and not grouping.flat
    assert any(n["kind"] == "fold" and n["repeat"] >= 11 for n in grouped["nodes"])
    small = backward_events(trace_source(BLOCKS.format(n=3)))[0]["graph"]
    assert readable_grouping(small) == FLAT and group_graph(small, FLAT) is small


def test_a_grouped_graph_is_drawn_by_graphviz_with_its_unit_ids(encoder_graph):
    grouped = group_graph(encoder_graph, Grouping(depth=3, fold=False))
    svg = render_graph(grouped, "svg").decode()
    for unit in grouped["nodes"]:
        assert f'id="{unit["id"]}"' in svg
    assert "model.layers.4" in svg and "ops" in svg


def test_a_graph_without_modules_is_drawn_flat_and_unknown_paths_are_ignored(trace_source):
    flat = backward_events(trace_source("""
import torch
x = torch.randn(3, requires_grad=True)
y = x
for _ in range(400):
    y = y * 1.01
y.sum().backward()
"""))[0]["graph"]
    assert len(flat["nodes"]) > 300 and readable_grouping(flat) == FLAT
    assert choose_grouping(flat) == FLAT
    # a request naming paths the graph does not have asks for the same picture as none
    assert choose_grouping(flat, depth=2, opened=frozenset({"nope", "x.y"})) == \
        choose_grouping(flat, depth=2)


def test_module_names_that_are_digits_but_not_ascii_do_not_break_grouping(trace_source):
    flat = backward_events(trace_source("""
import torch
from torch import nn
net = nn.Sequential()
for name in ("1", "²", "3"):
    net.add_module(name, nn.Linear(2, 2))
net(torch.randn(1, 2)).sum().backward()
"""))[0]["graph"]
    grouped = group_graph(flat, Grouping(depth=1))
    assert sorted(n["path"] for n in grouped["nodes"] if n["kind"] == "module") == \
        ["1", "3", "²"]


def test_a_weight_used_at_every_step_is_drawn_beside_each_use_in_a_big_flat_view(trace_source):
    """An RNN cell unrolled over 60 steps: in the flat view of every node its weights are drawn
    again beside each use (one node with 60 long edges made graphviz take minutes), and every
    flat edge is still drawn once, with the Trace's own edge id."""
    flat = backward_events(trace_source("""
import torch
from torch import nn
torch.manual_seed(0)
cell = nn.RNNCell(3, 4)
h = torch.zeros(2, 4)
for x in torch.randn(60, 2, 3):
    h = cell(x, h)
h.sum().backward()
"""))[0]["graph"]
    assert len(flat["nodes"]) > 300
    import xml.etree.ElementTree as ET

    svg = ET.fromstring(render_graph(flat, "svg"))
    ids = [g.get("id") for g in svg.iter() if g.get("id")]
    weight = next(n for n in flat["nodes"] if n.get("param") == "weight_ih")
    copies = [i for i in ids if i.startswith(f'{weight["id"]}-use')]
    uses = sum(e["source"] == weight["id"] for e in flat["edges"])
    assert uses == 60 and len(copies) == uses - 1
    edge_ids = [f'e-{e["source"]}-{e["target"]}-{e["slot"]}' for e in flat["edges"]]
    assert sorted(i for i in ids if i.startswith("e-")) == sorted(edge_ids)


def _tangled(tops: int = 10, children: int = 25, edges: int = 3000) -> dict:
    """A forged graph whose modules are few enough at depth 2 (250 boxes) but tangled: thousands
    of distinct edges between those boxes, a hundred at most between the depth-1 ones."""
    import random

    rng = random.Random(0)
    nodes = [{"id": f"n{i}", "name": f"Op{i}", "kind": "op",
              "module": f"m{i % tops}.c{(i // tops) % children}x"}
             for i in range(tops * children * 2)]
    return {"nodes": nodes, "roots": ["n0"], "edges": [
        {"source": f"n{rng.randrange(len(nodes))}", "target": f"n{rng.randrange(len(nodes))}",
         "slot": k} for k in range(edges)]}


def test_a_readable_grouping_is_bounded_in_edges_between_boxes_too():
    """Issue 38: a forged graph grouped into 92 boxes with 8,186 edges between them, which
    graphviz could not lay out in its minute. Past READABLE_EDGES the grouping is coarser, and
    says so in what graph.json carries."""
    from app.render.group import READABLE_EDGES, layout_document

    graph = _tangled()
    by_units = readable_grouping(graph, edge_limit=10**9)
    assert by_units.depth == 2 and not by_units.coarser  # what the units alone would draw
    drawn = group_graph(graph, by_units)
    assert len(drawn["nodes"]) <= 300 and len(drawn["edges"]) > READABLE_EDGES
    chosen = readable_grouping(graph)
    assert chosen.depth == 1 and chosen.coarser
    assert len(group_graph(graph, chosen)["edges"]) <= READABLE_EDGES
    doc = layout_document(graph, choose_grouping(graph))
    assert doc["grouping"]["coarser"] is True and doc["grouping"]["depth"] == 1
    assert doc["grouping"]["edge_limit"] == READABLE_EDGES
    # the same picture as the same depth asked for: the flag is no part of what is drawn
    assert choose_grouping(graph) == choose_grouping(graph, depth=1)


def test_a_real_models_readable_grouping_is_not_made_coarser(encoder_graph):
    chosen = readable_grouping(encoder_graph, limit=40)
    assert not chosen.coarser
    assert chosen == readable_grouping(encoder_graph, limit=40, edge_limit=10**9)


def test_a_grouping_too_tangled_even_at_depth_one_is_refused_at_once():
    """Depth 1 is as coarse as a grouping gets: 40 top modules with nearly every pair of them
    joined (as the forged report's 92 boxes with 8,186 edges) are refused before graphviz, with
    what to draw instead, rather than laid out for graphviz's whole minute."""
    import time

    from app.render import RenderError

    graph = _tangled(tops=40, children=10, edges=6000)
    grouping = readable_grouping(graph)
    assert grouping.depth == 1
    drawn = group_graph(graph, grouping)
    assert len(drawn["nodes"]) == 40 and len(drawn["edges"]) > 1500
    started = time.monotonic()
    with pytest.raises(RenderError, match="open one module"):
        render_graph(drawn, "svg")
    assert time.monotonic() - started < 5  # coarse: no graphviz ran
