"""A Trace graph drawn at a depth of its module tree: collapsed modules and folded repeats.

Every node of the flat graph is shown as exactly one *unit*: itself, a collapsed module, or a
fold of repeated sibling blocks (the 48 layers of an encoder, "× 48"). An edge between two
units stands for every flat edge between their members, so no edge between groups is lost or
invented; edges inside one unit are not drawn. Node paths come from the Trace (`module`), which
names modules the way their parameters are named.

- `Grouping(depth, opened, fold)`: modules at tree depth `depth` are drawn closed, shallower
  ones open; a path in `opened` is open whatever its depth (a fold opens by its own path,
  `layers.0-47`). depth None with fold False is the flat graph.
- `group_graph(graph, grouping)` -> a graph the DOT renderer draws like any other, with units
  of kind "module" and "fold" (ids `g0`, `f0`; their `path` is what a page opens).
- `readable_grouping(graph, limit)`: the deepest depth whose drawing has at most `limit` units.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Grouping", "group_graph", "readable_grouping", "choose_grouping", "layout_document",
           "FLAT", "READABLE_NODES", "units_of"]

READABLE_NODES = 300  # above this a first view opens collapsed


@dataclass(frozen=True)
class Grouping:
    depth: int | None = None
    opened: frozenset[str] = field(default_factory=frozenset)
    fold: bool = True

    @property
    def flat(self) -> bool:
        return self.depth is None and not self.fold


FLAT = Grouping(depth=None, fold=False)


def _segments(node: dict) -> tuple[str, ...]:
    module = node.get("module")
    return tuple(module.split(".")) if isinstance(module, str) and module else ()


@dataclass
class _Fold:
    parent: tuple[str, ...]
    members: list[str]  # the numbered child names, in order

    @property
    def path(self) -> str:
        return ".".join((*self.parent, f"{self.members[0]}-{self.members[-1]}"))


def _folds(graph: dict) -> dict[tuple[str, ...], _Fold]:
    """Runs of consecutively numbered sibling modules with the same ops: member prefix -> fold."""
    signature: dict[tuple[str, ...], Counter] = {}
    children: dict[tuple[str, ...], set[str]] = {}
    for node in graph["nodes"]:
        segs = _segments(node)
        for depth in range(1, len(segs) + 1):
            prefix = segs[:depth]
            children.setdefault(segs[:depth - 1], set()).add(segs[depth - 1])
            signature.setdefault(prefix, Counter())[(segs[depth:], node["name"])] += 1
    out: dict[tuple[str, ...], _Fold] = {}
    for parent, names in children.items():
        numbered = sorted((int(n), n) for n in names if n.isdigit())
        run: list[tuple[int, str]] = []
        for number, name in [*numbered, (None, None)]:
            same = run and number == run[-1][0] + 1 and \
                signature[(*parent, name)] == signature[(*parent, run[0][1])]
            if same:
                run.append((number, name))
                continue
            if len(run) >= 2:
                fold = _Fold(parent, [n for _, n in run])
                for member in fold.members:
                    out[(*parent, member)] = fold
            run = [(number, name)] if number is not None else []
    return out


def units_of(graph: dict, grouping: Grouping) -> tuple[dict[str, str], dict[str, dict]]:
    """(node id -> unit id, unit id -> unit record) for every flat node."""
    folds = _folds(graph) if grouping.fold else {}
    depth = grouping.depth
    unit_of: dict[str, str] = {}
    units: dict[str, dict] = {}
    by_path: dict[str, str] = {}

    def unit(kind: str, path: str, **extra) -> str:
        key = f"{kind}:{path}"
        if key not in by_path:
            uid = f"{'f' if kind == 'fold' else 'g'}{len(by_path)}"
            by_path[key] = uid
            units[uid] = {"id": uid, "kind": kind, "path": path, "members": 0, "ops": 0,
                          "params": [], "param_count": 0, **extra}
        return by_path[key]

    for node in graph["nodes"]:
        segs = _segments(node)
        chosen = None
        for length in range(1, len(segs) + 1):
            prefix = segs[:length]
            fold = folds.get(prefix)
            path = ".".join(prefix)
            if fold is not None and fold.path not in grouping.opened:
                chosen = unit("fold", fold.path, repeat=len(fold.members),
                              parent=".".join(fold.parent))
                break
            if fold is not None and path not in grouping.opened:
                chosen = unit("module", path)  # an opened fold shows its blocks closed
                break
            if depth is not None and length >= depth and path not in grouping.opened:
                chosen = unit("module", path)
                break
        if chosen is None:
            unit_of[node["id"]] = node["id"]
            continue
        unit_of[node["id"]] = chosen
        record = units[chosen]
        record["members"] += 1
        if node["kind"] in ("op", "custom"):
            record["ops"] += 1
        elif node["kind"] in ("param", "leaf"):
            record["param_count"] += 1
            if len(record["params"]) < 200:  # the names listed; the count is whole
                record["params"].append(node.get("param") or node["name"])
    return unit_of, units


def group_graph(graph: dict, grouping: Grouping) -> dict:
    """The graph as `grouping` draws it (the graph itself when the grouping is flat)."""
    if grouping.flat:
        return graph
    unit_of, units = units_of(graph, grouping)
    nodes = []
    for node in graph["nodes"]:
        uid = unit_of[node["id"]]
        if uid == node["id"]:
            nodes.append(node)
        elif uid in units:
            nodes.append(_unit_node(units.pop(uid)))
    edges: dict[tuple[str, str], dict] = {}
    for e in graph["edges"]:
        source, target = unit_of.get(e["source"]), unit_of.get(e["target"])
        if source is None or target is None or source == target:
            continue
        kept = edges.get((source, target))
        if kept is None:
            kept = edges[(source, target)] = {"source": source, "target": target,
                                              "slot": len(edges), "count": 0}
            if "shape" in e:
                kept["shape"] = e["shape"]
        kept["count"] += 1
        if kept.get("shape") != e.get("shape"):
            kept.pop("shape", None)  # several tensors cross here: no one shape to print
    roots = list(dict.fromkeys(unit_of[r] for r in graph["roots"] if r in unit_of))
    cuts = [c for c in graph.get("cuts", ()) if unit_of.get(c["node"]) == c["node"]
            and (c.get("source") is None or unit_of.get(c["source"]) == c["source"])]
    return {"nodes": nodes, "edges": list(edges.values()), "roots": roots,
            "truncated": graph.get("truncated", False), "cuts": cuts,
            "grouping": {"depth": grouping.depth, "opened": sorted(grouping.opened),
                         "fold": grouping.fold, "flat_nodes": len(graph["nodes"])}}


def _unit_node(record: dict) -> dict:
    path, kind = record["path"], record["kind"]
    params = record["params"]
    if kind == "fold":
        last = path.rsplit(".", 1)[-1]
        label = f"{record['parent']}.{last}" if record["parent"] else last
        name = f"{label} × {record['repeat']}"
    else:
        name = path
    return {"id": record["id"], "kind": kind, "name": name, "label": name, "path": path,
            "module": path, "line": None, "ops": record["ops"], "members": record["members"],
            "params": params, "param_count": record["param_count"],
            **({"repeat": record["repeat"]} if kind == "fold" else {})}


def readable_grouping(graph: dict, limit: int = READABLE_NODES) -> Grouping:
    """The flat graph when it is small enough; otherwise the deepest module depth (repeats
    folded) whose drawing has at most `limit` units, or depth 1 if none does."""
    if len(graph["nodes"]) <= limit:
        return FLAT
    deepest = max((len(_segments(n)) for n in graph["nodes"]), default=0)
    best = Grouping(depth=1)
    for depth in range(1, deepest + 1):
        grouping = Grouping(depth=depth)
        unit_of, _units = units_of(graph, grouping)
        if len(set(unit_of.values())) > limit:
            break
        best = grouping
    if best.depth == deepest:  # every module open: the folds alone may be enough
        unfolded = Grouping(depth=None)
        if len(set(units_of(graph, unfolded)[0].values())) <= limit:
            return unfolded
    return best


def choose_grouping(graph: dict, *, flat: bool = False, depth: int | None = None,
                    opened: frozenset[str] = frozenset(), fold: bool = True) -> Grouping:
    """What a request asks to see: the flat graph, a module depth (0: every module open, only
    repeats folded), or, with neither, the readable grouping, with `opened` paths open."""
    if flat:
        return FLAT
    if depth is None:
        auto = readable_grouping(graph)
        if auto.flat and not opened:
            return FLAT
        return Grouping(depth=auto.depth, opened=opened, fold=fold)
    return Grouping(depth=None if depth == 0 else depth, opened=opened, fold=fold)


def layout_document(graph: dict, grouping: Grouping) -> dict:
    """What the page needs to know of a drawing: its units (id, kind, path, counts) and the
    grouping it was drawn with. The drawn ops themselves are in the Trace already."""
    drawn = group_graph(graph, grouping)
    units = [{k: n[k] for k in ("id", "kind", "path", "name", "ops", "members", "params",
                                 "param_count", "repeat") if k in n}
             for n in drawn["nodes"] if n["kind"] in ("module", "fold")]
    return {"grouping": {"flat": grouping.flat, "depth": grouping.depth,
                         "opened": sorted(grouping.opened), "fold": grouping.fold},
            "nodes": len(drawn["nodes"]), "edges": len(drawn["edges"]),
            "flat_nodes": len(graph["nodes"]), "units": units}
