"""What AOTAutograd made of a compiled region, as the tracer keeps it, checked against the graphs
AOTAutograd itself hands a backend's compilers for the same model (min-cut partition, as
aot_eager): the same ops, the same saved values, the same recomputed ops; each region linked to
its own CompiledFunctionBackward node; and bounds on a forged huge region.
"""

from __future__ import annotations

from collections import Counter

import jsonschema
import pytest
import torch
import torch._dynamo
import torch.fx
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch._functorch.partitioners import min_cut_rematerialization_partition

from app.format import load_schema
from app.trace import compiled_graphs
from tests.trace.test_compile import MODELS, SCRIPT
from tests.trace_facts import backward_events


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def own_graphs(kind: str) -> list[dict]:
    """The model compiled plainly with our own aot_autograd backend, as aot_eager is made: the
    forward and backward graphs its compilers were given, per region in compile order."""
    graphs: list[dict] = []

    def fw(gm, example_inputs):
        graphs.append({"forward": gm})
        return boxed_nop(gm, example_inputs)

    def bw(gm, example_inputs):
        graphs.append({"backward": gm})
        return boxed_nop(gm, example_inputs)

    backend = aot_autograd(fw_compiler=fw, bw_compiler=bw,
                           partition_fn=min_cut_rematerialization_partition,
                           keep_inference_input_mutations=True)
    namespace: dict = {}
    exec(compile(MODELS, "<models>", "exec"), namespace)  # noqa: S102 - our own source
    torch.manual_seed(0)
    model = namespace[kind]()
    x = torch.randn(namespace["INPUTS"][kind])
    torch.compile(model, backend=backend)(x).pow(2).mean().backward()
    forwards = [g["forward"] for g in graphs if "forward" in g]
    # the backward runs last region first
    backwards = [g["backward"] for g in graphs if "backward" in g][::-1]
    return [expected(f, b) for f, b in zip(forwards, backwards, strict=True)]


def expected(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule) -> dict:
    """Saved and recomputed, by their definition: the backward's non-tangent placeholders (each
    one of the forward's outputs beyond the user's), and the backward ops also in the forward."""
    fw_ops = [n for n in fw.graph.nodes if n.op == "call_function"]
    bw_ops = [n for n in bw.graph.nodes if n.op == "call_function"]
    saved = [n.name for n in bw.graph.nodes
             if n.op == "placeholder" and not n.name.startswith("tangents_")]
    (fw_out,) = [n for n in fw.graph.nodes if n.op == "output"]
    outputs = [a.name for a in fw_out.args[0] if isinstance(a, torch.fx.Node)]
    assert outputs[-len(saved):] == saved  # what the forward returns past the user's outputs
    fw_targets = {n.name: str(n.target) for n in fw_ops}
    shapes = {n.name: list(n.meta["val"].shape) for n in bw.graph.nodes if n.op == "placeholder"}
    # names as dynamo ordered the region's inputs (primals_N), which may differ between runs:
    # a saved value is compared as what made it (an op, or "input") and its shape
    return {"fw_ops": Counter(fw_targets.values()),
            "bw_ops": Counter(str(n.target) for n in bw_ops),
            "saved": Counter((fw_targets.get(name, "input"), tuple(shapes[name]))
                             for name in saved),
            "saved_count": len(saved),
            "recomputed": Counter(str(n.target) for n in bw_ops if n.name in fw_targets)}


def recorded(region: dict) -> dict:
    return {"fw_ops": Counter(op["op"] for op in region["forward"]["ops"]),
            "bw_ops": Counter(op["op"] for op in region["backward"]["ops"]),
            "saved": Counter((s["op"], tuple(s["shape"])) for s in region["saved"]),
            "saved_count": region["saved_count"],
            "recomputed": Counter(r["op"] for r in region["recomputed"])}


def compiled_nodes(event: dict) -> list[dict]:
    return [n for n in event["graph"]["nodes"] if n["name"] == "CompiledFunctionBackward"]


def test_mlp_region_is_aotautograds_own_partition(trace_source):
    (mine,) = own_graphs("MLP")
    assert mine["recomputed"], "the min-cut partition recomputes the MLP's weight transpose"
    torch._dynamo.reset()
    doc = trace_source(SCRIPT, argv=["MLP", "compiled"])
    assert doc["error"] is None, doc["error"]
    jsonschema.validate(doc, load_schema())
    (region,) = doc["compiled_regions"]
    assert recorded(region) == mine
    assert region["forward"]["op_count"] == sum(mine["fw_ops"].values())
    assert region["backward"]["op_count"] == sum(mine["bw_ops"].values())
    assert all(s["kind"] == "tensor" and s["dtype"] == "float32" for s in region["saved"])
    # the weight the forward read is saved as it is (an input), the ReLU's output as an op's
    ops = {s["name"]: s.get("op") for s in region["saved"]}
    assert "input" in ops.values() and "aten.relu.default" in ops.values()
    (event,) = backward_events(doc)
    (node,) = compiled_nodes(event)
    assert node["compiled_region"] == region["id"]


def test_graph_break_gives_two_regions_each_linked_to_its_node(trace_source):
    mine = own_graphs("Broken")
    assert len(mine) == 2
    torch._dynamo.reset()
    doc = trace_source(SCRIPT, argv=["Broken", "compiled"])
    assert doc["error"] is None, doc["error"]
    jsonschema.validate(doc, load_schema())
    regions = doc["compiled_regions"]
    assert [recorded(r) for r in regions] == mine
    (event,) = backward_events(doc)
    nodes = compiled_nodes(event)
    assert sorted(n["compiled_region"] for n in nodes) == sorted(r["id"] for r in regions)
    by_region = {n["compiled_region"]: n for n in nodes}
    first, second = regions  # compile order: the first region's tanh, then the second Linear
    assert "aten.tanh.default" in recorded(first)["fw_ops"]
    assert "aten.tanh.default" not in recorded(second)["fw_ops"]
    # the node the loss reaches first is the second region's (the output side of the break)
    ids = {n["id"]: n for n in event["graph"]["nodes"]}
    edges = event["graph"]["edges"]
    later = by_region[second["id"]]["id"]
    earlier = by_region[first["id"]]["id"]
    assert any(e["source"] == earlier and e["target"] == later for e in edges), \
        (earlier, later, edges, ids)


def test_a_forged_huge_region_is_bounded():
    graph = torch.fx.Graph()
    x = graph.placeholder("primals_1")
    tangent = graph.placeholder("tangents_1")
    value = x
    for _ in range(compiled_graphs.MAX_GRAPH_NODES + 500):
        value = graph.call_function(torch.ops.aten.sin.default, (value,))
    graph.output((value, tangent))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    record, fw_seen = compiled_graphs.graph_record(gm)
    assert len(record["ops"]) == compiled_graphs.MAX_GRAPH_NODES
    assert record["op_count"] == compiled_graphs.MAX_GRAPH_NODES + 500
    assert record["truncated"] is True

    wide = torch.fx.Graph()
    inputs = [wide.placeholder("p" * 500 + str(i)) for i in range(40)]
    wide.output(wide.call_function(torch.ops.aten.cat.default, (inputs,)))
    (op,) = compiled_graphs.graph_record(torch.fx.GraphModule(torch.nn.Module(), wide))[0]["ops"]
    assert len(op["inputs"]) == compiled_graphs.MAX_INPUTS
    assert all(len(name) <= compiled_graphs.MAX_TEXT for name in op["inputs"])

    # a backward reading thousands of saved values: the region keeps the bound, and its count
    back = torch.fx.Graph()
    saved = [back.placeholder(f"sin_{i}") for i in range(compiled_graphs.MAX_GRAPH_NODES + 10)]
    back.output(back.call_function(torch.ops.aten.sin.default, (saved[0],)))
    backward, bw_seen = compiled_graphs.graph_record(torch.fx.GraphModule(torch.nn.Module(),
                                                                           back))
    region = compiled_graphs.region_record(7, record, backward, fw_seen, bw_seen)
    assert len(region["saved"]) == compiled_graphs.MAX_GRAPH_NODES
    assert region["saved_count"] == compiled_graphs.MAX_GRAPH_NODES + 10
    # the backward's one op has the name of the forward's first (FX names both alike)
    assert region["recomputed"] == [{"id": record["ops"][0]["id"], "op": "aten.sin.default"}]
    schema = load_schema()
    jsonschema.validate(region, {"$defs": schema["$defs"], "$ref": "#/$defs/compiled_region"})
    # recomputed is read off the whole forward, not the ops listed: the forward's last op
    # (past the listing) computed again in the backward is found
    last = list(fw_seen["targets"])[-1]
    assert last not in {op["id"] for op in record["ops"]}
    bw_seen["targets"][last] = "aten.sin.default"
    region = compiled_graphs.region_record(7, record, backward, fw_seen, bw_seen)
    assert {"id": last, "op": "aten.sin.default"} in region["recomputed"]

    # regions past the run's bound are counted, not kept
    capture = compiled_graphs.RegionCapture()
    for aot_id in range(compiled_graphs.MAX_REGIONS + 3):
        capture._on_graph("forward", aot_id, gm)
    assert len(capture.records()) == compiled_graphs.MAX_REGIONS
    assert capture.dropped == 3
    # and ops past the run's budget are counted, not listed
    listed = sum(len(r["forward"]["ops"]) for r in capture.records())
    assert listed == compiled_graphs.MAX_OPS
    assert all(r["forward"]["op_count"] == compiled_graphs.MAX_GRAPH_NODES + 500
               for r in capture.records())


def test_a_run_that_never_compiles_does_not_load_dynamo():
    """Keeping the graphs costs a run without torch.compile nothing: dynamo (a second to
    import) is loaded only when the backend first compiles."""
    import subprocess
    import sys

    code = ("import sys, torch; from app.trace.compiled import CompileCalls\n"
            "calls = CompileCalls(lambda: None)\n"
            "with calls.patched():\n"
            "    (torch.ones(2, requires_grad=True) * 2).sum().backward()\n"
            "print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
