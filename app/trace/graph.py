"""Every walk of a backward graph, in one module.

- `walk`: a grad_fn graph into plain data, nodes and edges. Iterative (a 100k-node graph must
  not hit the recursion limit) and breadth-first from the roots, so node ids ("n0" is the first
  root's grad_fn) are the same on every run of a deterministic script. An edge goes from a node
  listed in another node's `next_functions` (`source`) to that node (`target`), the way
  torchviz draws it.
- `grad_fn_reaches`: does a live grad_fn graph reach a given leaf?
- `reaches_within_statement`: on the walked data, does a node take gradient to a leaf through
  views of it or through nodes of its own statement?
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from app.format import clip

from . import _internals as internals
from .summary import describe

MODULE_TAG = "autograd_lab.module"

__all__ = ["Walk", "walk", "grad_fn_reaches", "reaches_within_statement", "storage_key",
           "MODULE_TAG"]

# name_leaf(tensor) -> (name, kind) with kind "parameter" or "leaf"
LeafNamer = Callable[[torch.Tensor], tuple[str, str]]


@dataclass
class Walk:
    nodes: list[dict] = field(default_factory=list)
    edges: list[dict] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)
    # node id -> grad_fn; holding them keeps the ids meaningful while hooks run
    fns: dict[str, Any] = field(default_factory=dict)
    # AccumulateGrad node id -> (leaf tensor, its name)
    leaves: dict[str, tuple[torch.Tensor, str]] = field(default_factory=dict)
    # custom Function node id -> the Function class
    customs: dict[str, type] = field(default_factory=dict)
    # the memory behind saved tensors, numbered in the order the walk meets it: the same number
    # on two nodes is one allocation (a Trace holds no addresses, and reads the same each run)
    storages: dict[int, int] = field(default_factory=dict)
    # non-reentrant checkpoint regions, numbered in the order the walk meets them: the frames
    # (held while the pass is recorded, so ids stay theirs) and what each keeps (its inputs)
    checkpoint_frames: dict[int, tuple[int, Any]] = field(default_factory=dict)
    checkpoints: list[dict] = field(default_factory=list)
    truncated: bool = False
    # op nodes no op of the code returned (the recorder never tagged them: a transpose inside
    # F.linear): they take another cell's line from their consumer (cell_line)
    untagged: set[str] = field(default_factory=set)

    def document(self) -> dict:
        doc = {
            "nodes": self.nodes,
            "edges": self.edges,
            "roots": self.roots,
            "truncated": self.truncated,
        }
        if self.checkpoints:
            doc["checkpoints"] = self.checkpoints
        return doc

    def checkpoint_index(self, frame: Any) -> int | None:
        known = self.checkpoint_frames.get(id(frame))
        return known[0] if known is not None and known[1] is frame else None


def walk(
    outputs: list[tuple[torch.Tensor, str]],
    *,
    script_path: str,
    name_leaf: LeafNamer,
    storage_names: dict[int, str] | None = None,
    max_nodes: int = 200_000,
) -> Walk:
    """Walk the graph behind `outputs` ((tensor, label) pairs)."""
    w = Walk()
    ids: dict[Any, str] = {}
    queue: deque = deque()
    storage_names = storage_names or {}

    def visit(fn: Any) -> str:
        node_id = f"n{len(ids)}"
        ids[fn] = node_id
        w.fns[node_id] = fn
        w.nodes.append(_describe_node(fn, node_id, w, script_path, name_leaf, storage_names))
        queue.append(fn)
        return node_id

    for i, (tensor, label) in enumerate(outputs):
        out_id = f"out{i}"
        out_node = {"id": out_id, "name": "output", "kind": "output", "label": label,
                    **describe(tensor), "line": None, "module": None}
        w.nodes.append(out_node)
        fn = tensor.grad_fn
        if fn is None:
            continue
        fn_id = ids.get(fn) or visit(fn)
        w.roots.append(fn_id)
        out_node["line"] = _script_line(fn, script_path)
        w.edges.append({"source": fn_id, "target": out_id, "slot": 0,
                        "shape": list(tensor.shape)})

    while queue:
        fn = queue.popleft()
        target = ids[fn]
        for slot, (nxt, _input_nr) in enumerate(fn.next_functions):
            if nxt is None:
                continue
            source = ids.get(nxt)
            if source is None:
                if len(ids) >= max_nodes:
                    w.truncated = True
                    continue
                source = visit(nxt)
            w.edges.append({"source": source, "target": target, "slot": slot})
    _inherit_from_consumers(w)
    return w


def grad_fn_reaches(fn: Any, leaf: torch.Tensor, max_nodes: int = 20_000) -> bool:
    """Does the graph behind grad_fn `fn` reach the AccumulateGrad of `leaf` (within
    `max_nodes` nodes)?"""
    seen, stack = {fn}, [fn]
    while stack and len(seen) < max_nodes:
        node = stack.pop()
        if internals.accumulated_leaf(node) is leaf:
            return True
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def reaches_within_statement(node: dict, leaf_id: str, inputs: dict[str, list[str]],
                             by_id: dict[str, dict]) -> bool:
    """Does walked `node` take gradient to the leaf node `leaf_id` through views of it or
    through its own statement's nodes (F.linear's TBackward0)? Paths through other
    computations do not count: they are other uses. `inputs`: node id -> its sources."""
    stack, seen = [node["id"]], {node["id"]}
    while stack:
        for source in inputs.get(stack.pop(), ()):
            if source == leaf_id:
                return True
            nxt = by_id[source]
            passes = nxt["kind"] in ("op", "custom") and (
                nxt.get("line") == node.get("line") or internals.is_view_node(nxt["name"]))
            if source not in seen and passes:
                seen.add(source)
                stack.append(source)
    return False


def _inherit_from_consumers(w: Walk) -> None:
    """Give internal nodes their consumer's module and line.

    An op like F.linear records helper nodes (the weight's TBackward0) that no torch call
    returned, so nothing tagged them; they come from the same line as the node that consumes
    them, and belong to the same module.
    """
    by_id = {n["id"]: n for n in w.nodes}
    # edges are listed breadth-first from the roots, so a node's consumer has its module (its
    # own or inherited) before the node is reached: a chain of helper nodes (the views and
    # transposes inside F.multi_head_attention_forward, where our op mode is not called) all
    # take the module of the op that consumed them
    for e in w.edges:
        node, consumer = by_id[e["source"]], by_id[e["target"]]
        # the same for lines: nodes no op returned are made by their consumer's statement
        if node["kind"] in ("op", "custom") and node.get("line") is None \
                and consumer["kind"] in ("op", "custom") and consumer.get("line") is not None:
            node["line"] = consumer["line"]
        # made by their consumer's statement, in another cell: that cell's line too
        if node["id"] in w.untagged and not node.get("cell_line") and consumer.get("cell_line") \
                and node.get("line") == consumer.get("line"):
            node["cell_line"] = consumer["cell_line"]
        if (node["kind"] in ("op", "custom") and node.get("module") is None
                and consumer.get("module") and node.get("line") == consumer.get("line")):
            node["module"] = consumer["module"]


def _script_line(fn: Any, script_path: str) -> int | None:
    """The innermost line of the script on the stack that created `fn`."""
    try:
        return internals.creation_line(fn, script_path)
    except Exception:  # noqa: BLE001 - nodes made outside anomaly mode have no metadata
        return None


MAX_NAME = 1000  # $defs/name in the schema
MAX_SAVED = 256   # saved values listed per node


def _describe_node(fn, node_id, w: Walk, script_path, name_leaf, storage_names) -> dict:
    name = clip(type(fn).__name__, MAX_NAME)
    node: dict[str, Any] = {"id": node_id, "name": name, "label": name}
    variable = internals.accumulated_leaf(fn)
    if variable is not None:
        leaf_name, kind = name_leaf(variable)
        leaf_name = clip(leaf_name, MAX_NAME)
        w.leaves[node_id] = (variable, leaf_name)
        # a module's parameter is named after it (`layers.0.linear1.weight`): it belongs there
        module = leaf_name.rsplit(".", 1)[0] if kind == "parameter" and "." in leaf_name \
            else None
        node.update(kind="param" if kind == "parameter" else "leaf", param=leaf_name,
                    label=leaf_name, line=None, module=module, **describe(variable))
        return node
    node["kind"] = "op"
    try:
        meta = internals.node_metadata(fn)
    except Exception:  # noqa: BLE001 - nodes from outside anomaly mode may lack metadata
        meta = {}
    module = meta.get(MODULE_TAG)
    node["module"] = clip(module, MAX_NAME) if isinstance(module, str) else None
    node["line"] = _script_line(fn, script_path)
    elsewhere = meta.get(internals.CELL_TAG)
    if isinstance(elsewhere, tuple) and len(elsewhere) == 2:
        node["cell_line"] = {"cell": elsewhere[0], "line": elsewhere[1]}
    elif internals.LINE_TAG not in meta:
        w.untagged.add(node_id)
    node["saved"] = _saved(fn, storage_names, w.storages,
                           packed=bool(meta.get(internals.PACKED_TAG)))
    ref = meta.get(internals.CHECKPOINT_TAG)
    frame = ref() if callable(ref) else None
    if frame is not None:
        node["checkpoint"] = _checkpoint(frame, w, storage_names)
    region = internals.compiled_region_of(fn)
    if region is not None:
        node["compiled_region"] = region  # its graphs: the Trace's compiled_regions
    if internals.is_custom_function_node(fn):
        node["kind"] = "custom"
        cls = internals.forward_class(fn)
        if cls is not None:
            w.customs[node_id] = cls
            node["function"] = clip(cls.__qualname__, MAX_NAME)
            node["backward_source"] = _backward_source(cls, script_path)
    return node


def _saved(fn: Any, storage_names: dict[int, str], storages: dict[int, int],
           packed: bool = False) -> list[dict]:
    out: list[dict] = []
    for name, value in internals.saved_values(fn, packed=packed)[:MAX_SAVED]:
        if value is internals.PACKED:
            out.append({"name": name, "packed": True})
        elif value is internals.FREED:
            out.append({"name": name, "freed": True})
        elif isinstance(value, internals.Modified):
            entry = {"name": name, "modified": True}
            if value.saved_version is not None:
                entry.update(saved_version=value.saved_version, version=value.version)
            out.append(entry)
        elif isinstance(value, torch.Tensor):
            # read through torch's version check, which passed: the version it was saved at is
            # the one it has now (in-place changes before the save did it no harm)
            out.append(_tensor_entry(name, value, storage_names, storages))
        elif value is None:
            continue
        else:
            text = repr(value)
            out.append({"name": name, "value": text if len(text) <= 80 else text[:77] + "..."})
    return out


def _tensor_entry(name: str, value: torch.Tensor, storage_names: dict[int, str],
                  storages: dict[int, int]) -> dict:
    entry = {"name": name, **describe(value), "version": value._version}
    key = storage_key(value)
    owner = storage_names.get(key)
    if owner is not None:
        entry["param"] = owner
    if key is not None:
        # the allocation's whole size (a saved view holds all of its base)
        entry["bytes"] = value.untyped_storage().nbytes()
        entry["storage"] = storages.setdefault(key, len(storages))
    return entry


MAX_CHECKPOINTS = 10_000  # regions listed per pass (the schema's bound)


def _checkpoint(frame: Any, w: Walk, storage_names: dict[int, str]) -> int | None:
    """The number of a non-reentrant checkpoint's region in this pass; met first, the region
    is listed with the inputs it keeps (all it keeps: its forward runs again in backward)."""
    index = w.checkpoint_index(frame)
    if index is not None or len(w.checkpoints) >= MAX_CHECKPOINTS:
        return index
    w.checkpoint_frames[id(frame)] = (len(w.checkpoints), frame)
    inputs = internals.checkpoint_inputs(frame)[:MAX_SAVED]
    w.checkpoints.append({"inputs": [_tensor_entry(f"input {i}", t, storage_names, w.storages)
                                     for i, t in enumerate(inputs)]})
    return len(w.checkpoints) - 1


def storage_key(t: torch.Tensor) -> int | None:
    """Identifies the memory behind a tensor: a `.data` or `detach()` alias shares it."""
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - sparse, meta and wrapper tensors have no plain storage
        return None


def _backward_source(cls: type, script_path: str) -> dict | None:
    """Where the custom Function's backward is written, and its lines."""
    try:
        lines, start = inspect.getsourcelines(cls.backward)
        file = inspect.getsourcefile(cls.backward) or ""
    except (OSError, TypeError):
        return None
    return {"file": "<script>" if file == script_path else file, "line": start,
            "source": "".join(lines)}
