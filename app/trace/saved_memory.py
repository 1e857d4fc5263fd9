"""The memory a pass's graph held for backward, from the walked nodes' saved tensors.

Each saved tensor carries the size of the memory behind it and a number naming that memory in this
pass (graph.py): a tensor saved by two nodes, or two views of one tensor, are one allocation and are
counted once. Memory that is a named leaf's (a parameter saved for its gradient's matmul) is kept
anyway, so it is counted apart from what the graph keeps alive only for backward (activations).
Tensors a saved_tensors_hooks pack hook took (a non-reentrant checkpoint's region) are counted by
number only: what the hook keeps is its own. What a checkpoint keeps is its region's inputs, on
a frame of its own (graph.py lists them; a pack hook outside the region is handed them): counted
in the pass, in no module. Per module, each allocation counts once in each module whose nodes
saved it. The numbers are PyTorch's: the tensors read are the ones autograd saved, the ones a
`saved_tensors_hooks` pack hook is handed (tests/trace/test_saved_memory.py and
tests/scenarios/test_checkpointing.py check that).
"""

from __future__ import annotations

__all__ = ["saved_memory"]

MAX_MODULES = 500  # the schema's bound on by_module


def saved_memory(nodes: list[dict], checkpoints=()) -> dict | None:
    """{"held_bytes", "leaf_bytes", "by_module"}, or None when no node saved a tensor.
    `checkpoints`: the graph's non-reentrant checkpoint regions, whose inputs the checkpoint
    keeps (on a frame of its own, no node's: counted in the pass, in no module)."""
    held: dict[int, int] = {}
    leaf: dict[int, int] = {}
    by_module: dict[str, dict[int, int]] = {}
    packed = 0
    for region in checkpoints:
        for entry in region["inputs"]:
            if "storage" in entry:
                (leaf if "param" in entry else held)[entry["storage"]] = entry["bytes"]
    for node in nodes:
        for entry in node.get("saved", ()):
            packed += bool(entry.get("packed"))
            if "storage" not in entry:
                continue
            number, size = entry["storage"], entry["bytes"]
            if "param" in entry:
                leaf[number] = size
                continue
            held[number] = size
            module = node.get("module")
            if module and (module in by_module or len(by_module) < MAX_MODULES):
                by_module.setdefault(module, {})[number] = size
    if not held and not leaf and not packed:
        return None
    # a leaf's memory saved by one node and seen plain by another is still the leaf's
    held = {k: v for k, v in held.items() if k not in leaf}
    out = {"held_bytes": sum(held.values()), "leaf_bytes": sum(leaf.values()),
           "by_module": {m: sum(v for k, v in sizes.items() if k not in leaf)
                         for m, sizes in by_module.items()}}
    if packed:
        # kept by a pack hook (a non-reentrant checkpoint keeps nothing, and recomputes them
        # in backward): not read, so not counted here
        out["packed_tensors"] = packed
    return out
