"""Graphs the script asked to see, each kept as a view of its own (the Trace's `views`).

- `make_dot`: a `torchviz.make_dot(var, params=...)` call. The tensors it was given are walked
  with the same walk as a backward pass, and the names in its `params` name their leaves, so
  the page draws the picture the script asked for, from the same data as the Trace's graphs.
- `gradient`: the graph a `create_graph=True` gradient carries (its `grad_fn` and what it
  reaches): the point of a double-backward scenario.

The worker runs no programs, so the `Digraph` make_dot returns is handed back with `render` and
`view` writing only the DOT source: the picture is on the run page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from app.format import clip

from .graph import walk

__all__ = ["ViewLog", "MAX_VIEWS", "MAX_VIEW_NODES", "VIEW_NODE_BUDGET", "best_match",
           "keep_picture_local"]

MAX_VIEWS = 20
MAX_VIEW_NODES = 20_000  # a picture larger than this is not one anybody reads
# all views together: a make_dot in a loop over a big model must not outgrow the report
VIEW_NODE_BUDGET = 50_000
MAX_NAMES = 200


class ViewLog:
    def __init__(self, script_path: str, namer, guard: Callable, current_line: Callable) -> None:
        self.script_path = script_path
        self.namer = namer
        self.guard = guard
        self.current_line = current_line
        self.records: list[dict] = []
        self.dropped = 0
        self.rendered: list[int | None] = []  # lines that asked graphviz for a picture
        # the first tensor with a graph the last make_dot was given, with its label and line:
        # a script that only draws (never calls backward) gets its backward pass from it
        self.last_root: tuple[torch.Tensor, str, int | None] | None = None

    def rendered_at(self) -> None:
        if len(self.rendered) < MAX_VIEWS:
            self.rendered.append(self.current_line())

    def finish(self, events: list[dict]) -> list[dict]:
        """The views, each make_dot one with the recorded pass that shares most of it."""
        counts: dict[int, dict] = {}
        for view in self.records:
            if view["kind"] == "make_dot":
                match = best_match(view, events, counts)
                if match:
                    view["matches"] = match
        return self.records

    def _room(self) -> bool:
        if len(self.records) >= MAX_VIEWS or self._nodes_left() <= 0:
            self.dropped += 1
            return False
        return True

    def _nodes_left(self) -> int:
        used = sum(1 for r in self.records for n in r["graph"]["nodes"] if n["kind"] != "output")
        return min(MAX_VIEW_NODES, VIEW_NODE_BUDGET - used)

    def make_dot(self, var: Any, params: Any) -> None:
        """The script called make_dot(var, params): walk what it was given."""
        if not self._room():
            return
        tensors = _tensors(var)
        given: dict[int, str] = {}
        if isinstance(params, dict):
            for name, t in list(params.items())[:MAX_NAMES]:
                if isinstance(t, torch.Tensor):
                    given.setdefault(id(t), clip(str(name), 200))
        with self.guard():
            self.namer.refresh()

            def name_leaf(t: torch.Tensor) -> tuple[str, str]:
                name, kind = self.namer.name(t)
                return (given.get(id(t), name), kind)

            outputs = [(t, given.get(id(t)) or self.namer.variable_name_of(t) or "output")
                       for t in tensors]
            w = walk(outputs, script_path=self.script_path, name_leaf=name_leaf,
                     max_nodes=self._nodes_left())
        line = self.current_line()
        for t, label in outputs:
            if t.grad_fn is not None:
                self.last_root = (t, label, line)
                break
        self.records.append({
            "index": len(self.records), "kind": "make_dot", "call": "torchviz.make_dot",
            "line": line, "event": None,
            "label": clip("make_dot(" + ", ".join(label for _t, label in outputs) + ")", 500),
            "names": sorted(set(given.values())), "graph": w.document()})

    def drawn(self, kind: str, call: str, line: int | None, label: str,
              outputs: list[tuple[torch.Tensor, str]],
              names: dict[int, tuple[str, str]] | None = None) -> int | None:
        """A graph autograd-lab draws where the script made no pass to draw (`manual_nodes`:
        the graph of nodes it called by hand; `func_forward`: a torch.func function's forward
        graph); `names` (id -> (name, kind)) names leaves the namer does not know. Its index."""
        if not self._room():
            return None
        names = names or {}
        with self.guard():
            self.namer.refresh()

            def name_leaf(t: torch.Tensor) -> tuple[str, str]:
                return names.get(id(t)) or self.namer.name(t)

            w = walk(outputs, script_path=self.script_path, name_leaf=name_leaf,
                     max_nodes=self._nodes_left())
        self.records.append({
            "index": len(self.records), "kind": kind, "call": call, "line": line,
            "event": None, "label": clip(label, 500),
            "names": sorted({n for n, _kind in names.values()})[:MAX_NAMES],
            "graph": w.document()})
        return self.records[-1]["index"]

    def gradients(self, event: int, line: int | None,
                  grads: list[tuple[torch.Tensor, str]]) -> int | None:
        """The graph the gradients of backward `event` carry; its view's index."""
        if not grads or not self._room():
            return None
        with self.guard():
            w = walk(grads, script_path=self.script_path, name_leaf=self.namer.name,
                     max_nodes=self._nodes_left())
        self.records.append({
            "index": len(self.records), "kind": "gradient", "call": "create_graph=True",
            "line": line, "event": event,
            "label": clip("the graph of " + ", ".join(label for _t, label in grads), 500),
            "names": [], "graph": w.document()})
        return self.records[-1]["index"]


def _key(node: dict) -> tuple:
    return (node["kind"], node["name"], node.get("line"))


def best_match(view: dict, events: list[dict], counts: dict[int, dict] | None = None
               ) -> dict | None:
    """The backward event whose graph shares most of the view's nodes, compared by what a node
    is (its op and line; a leaf is one of the leaves): what the page says beside the view.
    `counts` keeps each event's node counts between calls (one count per event per run)."""
    wanted = [_key(n) for n in view["graph"]["nodes"] if n["kind"] != "output"]
    if not wanted:
        return None
    counts = {} if counts is None else counts
    best = None
    for e in events:
        if e["kind"] != "backward":
            continue
        if e["index"] not in counts:
            found: dict[tuple, int] = {}
            for n in e["graph"]["nodes"]:
                found[_key(n)] = found.get(_key(n), 0) + 1
            counts[e["index"]] = found
        have = dict(counts[e["index"]])
        shared = 0
        for k in wanted:
            if have.get(k, 0) > 0:
                have[k] -= 1
                shared += 1
        if shared and (best is None or shared > best["shared"]):
            best = {"event": e["index"], "shared": shared, "nodes": len(wanted)}
    return best


def keep_picture_local(graph: Any, note: Callable[[], None]) -> Any:
    """make_dot's Digraph, its `render` and `view` writing the DOT source only: running
    graphviz is not allowed in the worker, and the page draws the same graph."""
    save = getattr(graph, "save", None)
    if save is None:
        return graph

    def render(filename=None, directory=None, view=False, cleanup=False, format=None,
               *args, **kwargs):
        note()
        path = save(filename, directory)
        return f"{path}.{format or getattr(graph, 'format', 'pdf')}"

    def view(filename=None, directory=None, cleanup=False, *args, **kwargs):
        note()
        return save(filename, directory)

    try:
        graph.render = render
        graph.view = view
    except AttributeError:
        pass
    return graph


def _tensors(var: Any) -> list[torch.Tensor]:
    if isinstance(var, torch.Tensor):
        return [var]
    if isinstance(var, (list, tuple)):
        return [t for t in var if isinstance(t, torch.Tensor)][:MAX_NAMES]
    return []
