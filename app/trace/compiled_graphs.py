"""What AOTAutograd made of each compiled region: its forward and backward graphs (ATen ops), what
the forward saves for the backward, and what the backward computes again.

The run's aot_eager backend is torch's own with its compilers wrapped
(`_internals.aot_eager_capturing`): the same min-cut partition and the same graphs run, and
each forward and backward graph AOTAutograd hands its compilers is read here, as it is, into
plain lists. A region is keyed by AOTAutograd's id for it, which its `CompiledFunctionBackward`
nodes carry (`_internals.compiled_region_of`), so each such node of a recorded graph names its
region (`compiled_region`). Everything is bounded: regions per run, ops per graph and per run,
inputs per op, text; counts are of the whole graphs.

Read from the graphs, not restated:
- forward / backward ops: the graph's `call_function` nodes, each with its ATen target and the
  names of the nodes it reads (placeholders included: `primals_N` are the region's inputs,
  `tangents_N` the gradients of its outputs).
- saved: the backward graph's placeholders other than `tangents_*`. The partitioner names each
  after the forward node it is (a forward output beyond the user's outputs), so a saved value is
  either one of the forward's inputs (`primals_N`) or a forward op's result.
- recomputed: the backward's ops whose name is also a forward op's. Both graphs are cut from
  one joint graph and keep its node names; a node in both is one the partitioner chose to
  compute again in the backward rather than save (its rematerialization).
"""

from __future__ import annotations

from typing import Any

from . import _internals as internals

__all__ = ["MAX_GRAPH_NODES", "MAX_OPS", "MAX_REGIONS", "RegionCapture", "graph_record",
           "region_record"]

MAX_REGIONS = 16        # compiled regions kept per run
MAX_GRAPH_NODES = 2000  # ops listed per graph (and saved values, recomputed ops per region)
MAX_OPS = 20_000        # ops listed in all the run's graphs together
MAX_INPUTS = 16         # inputs listed per op
MAX_TEXT = 200          # an op's target, a node's name


def _clip(text: Any) -> str:
    text = str(text)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


def _inputs(node: Any) -> list[str]:
    out: list[str] = []
    for arg in node.all_input_nodes:
        if len(out) >= MAX_INPUTS:
            break
        out.append(_clip(arg.name))
    return out


def _shape_of(value: Any) -> dict:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:  # a size the backward needs, or nothing known
        return {"kind": "symint"} if type(value).__name__ in ("SymInt", "int") else {}
    try:
        dims = [int(d) for d in shape]
    except Exception:  # noqa: BLE001 - a symbolic size: said as text
        return {"kind": "tensor", "dtype": _clip(str(dtype).removeprefix("torch."))}
    return {"kind": "tensor", "shape": dims[:64],
            "dtype": _clip(str(dtype).removeprefix("torch."))}


def graph_record(gm: Any, limit: int = MAX_GRAPH_NODES) -> tuple[dict, dict[str, Any]]:
    """One FX graph: its placeholders' names, its first `limit` ops and their count; and, for
    `region_record`, all its ops' targets by name and its placeholders' values (fake tensors,
    for their shapes)."""
    ops: list[dict] = []
    placeholders: list[str] = []
    values: dict[str, Any] = {}
    targets: dict[str, str] = {}
    untangled = 0  # placeholders other than tangents_*: in a backward, the saved values
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            untangled += not node.name.startswith("tangents_")
            if len(placeholders) < MAX_GRAPH_NODES:
                placeholders.append(_clip(node.name))
                values[node.name] = node.meta.get("val")
        elif node.op == "call_function":
            targets[node.name] = _clip(node.target)
            if len(ops) < limit:
                ops.append({"id": _clip(node.name), "op": targets[node.name],
                            "inputs": _inputs(node)})
    record = {"ops": ops, "op_count": len(targets), "inputs": placeholders}
    if len(targets) > len(ops):
        record["truncated"] = True
    return record, {"values": values, "targets": targets, "untangled": untangled}


def region_record(aot_id: int, forward: dict | None, backward: dict | None,
                  fw_seen: dict[str, Any], bw_seen: dict[str, Any]) -> dict:
    """A region as the Trace keeps it, its saved values and recomputed ops read off its two
    whole graphs (see the module's docstring); `*_seen` are `graph_record`'s second part."""
    region: dict[str, Any] = {"id": aot_id, "forward": forward, "backward": backward}
    if backward is None:
        return region  # its backward never ran: AOTAutograd compiles it when it first does
    fw_ops = fw_seen.get("targets", {})
    saved = []
    for name in backward["inputs"]:
        if name.startswith("tangents_"):
            continue
        if len(saved) < MAX_GRAPH_NODES:
            op = fw_ops.get(name, "input" if name.startswith("primals_") else None)
            entry = {"name": name, **({"op": op} if op else {}),
                     **_shape_of(bw_seen["values"].get(name))}
            saved.append(entry)
    region["saved"] = saved
    region["saved_count"] = bw_seen.get("untangled", len(saved))
    recomputed = [{"id": _clip(name), "op": target}
                  for name, target in bw_seen["targets"].items() if name in fw_ops]
    region["recomputed"] = recomputed[:MAX_GRAPH_NODES]
    return region


class RegionCapture:
    """The graphs of the run's compiled regions, kept as AOTAutograd compiles them."""

    def __init__(self) -> None:
        self._graphs: dict[int, dict[str, Any]] = {}  # aot_id -> forward, backward, what was seen
        self.dropped = 0  # regions past MAX_REGIONS
        self.ops_left = MAX_OPS  # ops listed in the run's regions, all graphs together
        self.backend = internals.aot_eager_capturing(self._on_graph)  # one, for dynamo's cache

    def _on_graph(self, kind: str, aot_id: int, gm: Any) -> None:
        if aot_id not in self._graphs:
            if len(self._graphs) >= MAX_REGIONS:
                if kind == "forward":
                    self.dropped += 1
                return
            self._graphs[aot_id] = {"forward": None, "backward": None,
                                    "forward_seen": {}, "backward_seen": {}}
        record, seen = graph_record(gm, min(MAX_GRAPH_NODES, self.ops_left))
        self.ops_left -= len(record["ops"])
        self._graphs[aot_id][kind] = record
        self._graphs[aot_id][f"{kind}_seen"] = seen

    def records(self) -> list[dict]:
        return [region_record(aot_id, g["forward"], g["backward"], g["forward_seen"],
                              g["backward_seen"]) for aot_id, g in self._graphs.items()]
