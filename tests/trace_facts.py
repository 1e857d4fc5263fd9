"""Helpers to read Trace documents in tests: values back into tensors, lookups by name."""

from __future__ import annotations

from collections import Counter

import torch


def values(summary: dict) -> torch.Tensor:
    """The tensor a summary with values describes (float64)."""
    assert summary is not None and "values" in summary, "summary has no values"
    return torch.tensor(summary["values"], dtype=torch.float64).reshape(summary["shape"])


def backward_events(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "backward"]


def step_events(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"] == "step"]


def node(event: dict, node_id: str) -> dict:
    return next(n for n in event["graph"]["nodes"] if n["id"] == node_id)


def param_node(event: dict, name: str) -> dict | None:
    return next((n for n in event["graph"]["nodes"] if n.get("param") == name), None)


def contribution_sum(event: dict, name: str) -> torch.Tensor:
    """What the pass added to `name`'s .grad by the Trace: its uses' contributions and, where
    the script hooked it, the hooks' shares."""
    uses = event["contributions"][name]
    shares = (event.get("hooks") or {}).get(name, [])
    return sum(values(u["grad"]) for u in [*uses, *shares])


def diagnostics(doc: dict, code: str) -> list[dict]:
    return [d for d in doc["diagnostics"] if d["code"] == code]


def grad_fns(fn) -> set:
    """Every node of the plain graph reachable from `fn` (a tensor's grad_fn), as PyTorch
    links them through next_functions; AccumulateGrad nodes included."""
    seen, todo = set(), [fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        todo.extend(f for f, _ in fn.next_functions)
    return seen


def gradients_by_node(root: torch.Tensor) -> Counter:
    """(node name, input slot, dtype) of every gradient PyTorch's backward passed a node's
    inputs, from hooks on the plain graph's own nodes; runs `root.backward()`."""
    seen: Counter = Counter()
    stack, visited = [root.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in visited:
            continue
        visited.add(fn)
        name = type(fn).__name__
        fn.register_hook(lambda gi, go, name=name: seen.update(
            (name, slot, str(g.dtype).removeprefix("torch."))
            for slot, g in enumerate(gi) if g is not None))
        stack.extend(f for f, _ in fn.next_functions)
    root.backward()
    return seen


def drawn_dtypes(event: dict) -> Counter:
    """(node name, input slot, dtype) of every edge the Trace drew with a dtype."""
    names = {n["id"]: n["name"] for n in event["graph"]["nodes"]}
    return Counter((names[e["target"]], e["slot"], e["dtype"])
                   for e in event["graph"]["edges"] if "dtype" in e)
