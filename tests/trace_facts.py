"""Helpers to read Trace documents in tests: values back into tensors, lookups by name."""

from __future__ import annotations

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
