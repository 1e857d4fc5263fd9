"""A Trace too large for the report bound is made smaller, not refused (issue 24): first the
tensors' kept values go (their statistics stay), then the compiled regions' graphs
(`compiled_regions`), then the backward passes after the first
(counted in `events_skipped`), then each remaining graph's nodes past a bound (the graph says
it is `truncated`). What was dropped is said in one diagnostic. Torch-free: the worker calls it
before it writes its report; the bound is the one the supervisor reads back.
"""

from __future__ import annotations

from typing import Any

from . import json_text
from .build import diagnostic

__all__ = ["report_text", "shrink_to", "size_of", "drop_values"]

NODES_KEPT = 20_000  # per graph at most, at the last step (fewer where the bound needs it)


def report_text(doc: dict, fast: bool = True) -> bytes:
    """`doc` as the worker writes it (json_text.py: compact UTF-8; `fast`: through orjson)."""
    return json_text.dumps(doc, fast)


def size_of(doc: dict) -> int:
    """Bytes of `doc` as the worker writes it. Through json's encoder: a document being made
    smaller is a large one, in a worker whose room the script may have taken (json_text.py)."""
    return len(report_text(doc, fast=False))


def shrink_to(doc: dict, max_bytes: int, bound: int | None = None,
              size: int | None = None) -> dict:
    """`doc` if it fits in `max_bytes`, else a smaller one, step by step, saying what went
    (and that it was larger than `bound`, the bound a person knows, when it is given).
    `size`: the caller's measure of `doc`, when it has one (a whole encoding is not free)."""
    size = original = size_of(doc) if size is None else size
    if size <= max_bytes:
        return doc
    dropped: list[str] = []
    if drop_values(doc):
        dropped.append("the tensors' values (their statistics are kept)")
        size = size_of(doc)
    if size > max_bytes and doc.get("compiled_regions"):
        doc.pop("compiled_regions")
        dropped.append("the graphs AOTAutograd made of the compiled regions")
        size = size_of(doc)
    if size > max_bytes:
        later = _drop_later_passes(doc)
        if later:
            dropped.append(f"{later} backward pass{'es' if later > 1 else ''} after the first")
            size = size_of(doc)
    if size > max_bytes:
        share = max_bytes / size * 0.9  # the graphs are most of what is left
        cut = kept = 0
        for e in doc.get("events", ()):
            if e.get("kind") == "backward":
                kept = min(NODES_KEPT, max(100, int(len(e["graph"]["nodes"]) * share)))
                cut += _keep_nodes(e["graph"], e, kept)
        if cut:
            dropped.append(f"{cut:,} nodes of the graph past the first {kept:,}")
    doc.setdefault("diagnostics", []).append(diagnostic(
        "trace_shrunk", "warning",
        f"This run's trace took {size_of_mb(original)} MiB, more than the "
        f"{size_of_mb(bound or max_bytes)} MiB a "
        f"run's report may take, so it was made smaller: dropped {'; then '.join(dropped)}. "
        "A smaller model, fewer backward passes or fewer elementwise steps give the whole "
        "picture."))
    return doc


def size_of_mb(size: int) -> str:
    return f"{size / (1 << 20):,.1f}"


def drop_values(node: Any) -> bool:
    """Remove the `values` of every tensor summary (a dict with `numel`) in `node`."""
    found = False
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "numel" in item and "values" in item:
                del item["values"]
                found = True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _drop_later_passes(doc: dict) -> int:
    events = doc.get("events") or []
    backward = [e for e in events if e.get("kind") == "backward"]
    later = {id(e) for e in backward[1:]}
    if not later:
        return 0
    doc["events"] = [e for e in events if id(e) not in later]
    skipped = doc.setdefault("events_skipped", {})
    skipped["backward"] = skipped.get("backward", 0) + len(later)
    return len(later)


def _keep_nodes(graph: dict, event: dict, bound: int) -> int:
    """Keep a graph's first `bound` nodes (the walk's order: from the root down), and what
    refers only to them; returns how many went."""
    nodes = graph.get("nodes") or []
    if len(nodes) <= bound:
        return 0
    kept = {n["id"] for n in nodes[:bound]}
    graph["nodes"] = nodes[:bound]
    graph["edges"] = [e for e in graph.get("edges", ())
                      if e["source"] in kept and e["target"] in kept]
    graph["roots"] = [r for r in graph.get("roots", ()) if r in kept]
    if "cuts" in graph:
        graph["cuts"] = [c for c in graph["cuts"] if c.get("node") in kept and
                         c.get("source") in (None, *kept)]
    graph["truncated"] = True
    event["order"] = [n for n in event.get("order", ()) if n in kept]
    event["contributions"] = {
        name: [c for c in uses if c["node"] in kept]
        for name, uses in (event.get("contributions") or {}).items()}
    return len(nodes) - bound
