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
- `readable_grouping(graph, limit)`: the deepest depth whose drawing has at most `limit` units
  and `READABLE_EDGES` edges between them (a forged graph's 92 boxes with 8,186 edges between
  them were past graphviz's 60 s); a grouping made coarser for its edges says so
  (`Grouping.coarser`, graph.json's `grouping.coarser`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Analysis", "Grouping", "analyze", "group_graph", "readable_grouping",
           "choose_grouping", "layout_document", "FLAT", "READABLE_NODES", "READABLE_EDGES",
           "units_of"]

READABLE_NODES = 300  # above this a first view opens collapsed
# edges between units a readable grouping may have: a real model's 300 units have a few hundred
READABLE_EDGES = 1_500


@dataclass(frozen=True)
class Grouping:
    depth: int | None = None
    opened: frozenset[str] = field(default_factory=frozenset)
    fold: bool = True
    # chosen coarser than its units allow, for the edges between them (readable_grouping): said
    # on the page, and no part of what is drawn (two groupings differing only here are one)
    coarser: bool = field(default=False, compare=False)

    @property
    def flat(self) -> bool:
        return self.depth is None and not self.fold


FLAT = Grouping(depth=None, fold=False)


# module trees deeper than this are drawn as if cut there: real models are a few levels deep,
# and a forged report's 500-level paths must not cost the server quadratic work
MAX_DEPTH = 16
MAX_UNITS_LISTED = 20_000  # units described in graph.json (a drawing has at most 20,000 nodes)


def _segments(node: dict) -> tuple[str, ...]:
    module = node.get("module")
    if not isinstance(module, str) or not module:
        return ()
    return tuple(module.split(".", MAX_DEPTH)[:MAX_DEPTH])


@dataclass
class _Fold:
    parent: tuple[str, ...]
    members: list[str]  # the numbered child names, in order

    @property
    def path(self) -> str:
        return ".".join((*self.parent, f"{self.members[0]}-{self.members[-1]}"))


@dataclass
class Analysis:
    """What every grouping of one graph needs, worked out once: each node's module path (cut
    at MAX_DEPTH), the folds, the deepest level, and every path a request may open."""
    segments: list[tuple[str, ...]]
    folds: dict[tuple[str, ...], _Fold]
    deepest: int
    known: frozenset[str]


def analyze(graph: dict) -> Analysis:
    segments = [_segments(node) for node in graph["nodes"]]
    folds = _folds(graph, segments)
    known = {".".join(segs[:d]) for segs in segments for d in range(1, len(segs) + 1)}
    known.update(fold.path for fold in folds.values())
    return Analysis(segments, folds, max(map(len, segments), default=0), frozenset(known))


def _folds(graph: dict, segments: list[tuple[str, ...]]) -> dict[tuple[str, ...], _Fold]:
    """Runs of consecutively numbered sibling modules with the same ops: member prefix -> fold."""
    # a module's signature: how many nodes it holds, and a sum of hashes of (where inside it,
    # op name) over them, an order-free fingerprint of its ops that costs one number
    signature: dict[tuple[str, ...], list[int]] = {}
    children: dict[tuple[str, ...], set[str]] = {}
    for node, segs in zip(graph["nodes"], segments, strict=True):
        for depth in range(1, len(segs) + 1):
            prefix = segs[:depth]
            children.setdefault(segs[:depth - 1], set()).add(segs[depth - 1])
            sig = signature.setdefault(prefix, [0, 0])
            sig[0] += 1
            sig[1] = (sig[1] + hash((segs[depth:], node["name"]))) & 0xFFFFFFFFFFFFFFFF
    out: dict[tuple[str, ...], _Fold] = {}
    for parent, names in children.items():
        # ascii digits only: "²".isdigit() is true, and int() refuses it
        numbered = sorted((int(n), n) for n in names if n.isascii() and n.isdigit())
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


def units_of(graph: dict, grouping: Grouping, analysis: Analysis | None = None
             ) -> tuple[dict[str, str], dict[str, dict]]:
    """(node id -> unit id, unit id -> unit record) for every flat node."""
    analysis = analysis or analyze(graph)
    folds = analysis.folds if grouping.fold else {}
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

    for node, segs in zip(graph["nodes"], analysis.segments, strict=True):
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


def group_graph(graph: dict, grouping: Grouping, analysis: Analysis | None = None) -> dict:
    """The graph as `grouping` draws it (the graph itself when the grouping is flat)."""
    if grouping.flat:
        return graph
    unit_of, units = units_of(graph, grouping, analysis)
    nodes = []
    for node in graph["nodes"]:
        uid = unit_of[node["id"]]
        if uid == node["id"]:
            nodes.append(node)
        elif uid in units:
            nodes.append(_unit_node(units.pop(uid)))
    edges: dict[tuple, dict] = {}
    for e in graph["edges"]:
        source, target = unit_of.get(e["source"]), unit_of.get(e["target"])
        if source is None or target is None or source == target:
            continue
        if source == e["source"] and target == e["target"]:
            # between two nodes drawn as they are: the Trace's own edge, id and all, so the
            # page's replay still finds it
            edges[(source, target, e["slot"])] = {**e, "count": 1}
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
    cuts, seen = [], set()
    for c in graph.get("cuts", ()):  # a cut inside a closed module is drawn on its box
        node = unit_of.get(c["node"])
        source = unit_of.get(c["source"]) if c.get("source") is not None else None
        if node is None or node == source or (node, source) in seen:
            continue
        seen.add((node, source))
        cuts.append({**c, "node": node, "source": source})
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


def _unit_keys(graph: dict, analysis: Analysis, depth: int | None) -> list:
    """Each node's unit at `depth` (repeats folded, nothing opened), as a hashable key: its
    fold from the fold's level on, else its module from the depth on, else itself."""
    keys = []
    for node, segs in zip(graph["nodes"], analysis.segments, strict=True):
        fold_at = next((n for n in range(1, len(segs) + 1) if segs[:n] in analysis.folds),
                       None)
        if fold_at is not None and (depth is None or fold_at <= depth):
            keys.append(("f", segs[:fold_at]))
        elif depth is not None and depth <= len(segs):
            keys.append(("g", segs[:depth]))
        else:
            keys.append(node["id"])
    return keys


def _unit_counts(graph: dict, analysis: Analysis) -> dict[int | None, int]:
    """How many units each depth draws (repeats folded, nothing opened), for every depth in
    one pass (as _unit_keys says a node's unit)."""
    keys: dict[int | None, set] = {d: set() for d in [*range(1, analysis.deepest + 1), None]}
    for node, segs in zip(graph["nodes"], analysis.segments, strict=True):
        fold_at = next((n for n in range(1, len(segs) + 1) if segs[:n] in analysis.folds),
                       None)
        for depth in keys:
            if fold_at is not None and (depth is None or fold_at <= depth):
                keys[depth].add(("f", segs[:fold_at]))
            elif depth is not None and depth <= len(segs):
                keys[depth].add(("g", segs[:depth]))
            else:
                keys[depth].add(node["id"])
    return {depth: len(found) for depth, found in keys.items()}


def _unit_edges(graph: dict, analysis: Analysis, depth: int | None, limit: int) -> int:
    """How many edges between units `depth` draws, counted up to just past `limit`."""
    keys = _unit_keys(graph, analysis, depth)
    index = {node["id"]: i for i, node in enumerate(graph["nodes"])}
    seen: set = set()
    for e in graph["edges"]:
        source, target = index.get(e["source"]), index.get(e["target"])
        if source is None or target is None or keys[source] == keys[target]:
            continue
        seen.add((keys[source], keys[target]))
        if len(seen) > limit:
            break
    return len(seen)


def readable_grouping(graph: dict, limit: int = READABLE_NODES,
                      analysis: Analysis | None = None,
                      edge_limit: int = READABLE_EDGES) -> Grouping:
    """The flat graph when it is small enough (or has no modules); otherwise the deepest module
    depth (repeats folded) whose drawing has at most `limit` units and `edge_limit` edges
    between them, or depth 1 if none does (`coarser` when the edges made it shallower)."""
    if len(graph["nodes"]) <= limit:
        return FLAT
    analysis = analysis or analyze(graph)
    if not analysis.deepest:
        return FLAT
    counts = _unit_counts(graph, analysis)
    best = 1
    for depth in range(1, analysis.deepest + 1):
        if counts[depth] > limit:
            break
        best = depth
    # deepest first (None: every module open, only repeats folded); the edges between units
    # only fall as the grouping gets coarser
    order: list[int | None] = [None] if counts[None] <= limit else []
    order += range(best, 0, -1)
    for i, depth in enumerate(order):
        if _unit_edges(graph, analysis, depth, edge_limit) <= edge_limit:
            return Grouping(depth=depth, coarser=i > 0)
    return Grouping(depth=1, coarser=order[0] != 1)


def choose_grouping(graph: dict, *, flat: bool = False, depth: int | None = None,
                    opened: frozenset[str] = frozenset(), fold: bool = True,
                    analysis: Analysis | None = None) -> Grouping:
    """What a request asks to see: the flat graph, a module depth (0: every module open, only
    repeats folded), or, with neither, the readable grouping, with `opened` paths open. Paths
    the graph does not have are dropped and a depth past its deepest module means every module
    open, so requests that would draw the same picture ask for the same one."""
    if flat:
        return FLAT
    analysis = analysis or analyze(graph)
    opened = frozenset(p for p in opened if p in analysis.known)
    if depth is None:
        auto = readable_grouping(graph, analysis=analysis)
        if auto.flat and not opened:
            return FLAT
        return Grouping(depth=auto.depth, opened=opened, fold=fold, coarser=auto.coarser)
    if depth == 0 or depth > analysis.deepest:
        return Grouping(depth=None, opened=opened, fold=fold)
    return Grouping(depth=depth, opened=opened, fold=fold)


def layout_document(graph: dict, grouping: Grouping, analysis: Analysis | None = None) -> dict:
    """What the page needs to know of a drawing: its units (id, kind, path, counts) and the
    grouping it was drawn with. The drawn ops themselves are in the Trace already."""
    drawn = group_graph(graph, grouping, analysis)
    analysis = analysis or analyze(graph)
    units = [{**{k: n[k] for k in ("id", "kind", "path", "name", "ops", "members",
                                    "param_count", "repeat") if k in n},
              "params": n["params"][:20]}
             for n in drawn["nodes"] if n["kind"] in ("module", "fold")][:MAX_UNITS_LISTED]
    return {"grouping": {"flat": grouping.flat, "depth": grouping.depth,
                         "opened": sorted(grouping.opened), "fold": grouping.fold,
                         "deepest": analysis.deepest, "coarser": grouping.coarser,
                         "edge_limit": READABLE_EDGES},
            "nodes": len(drawn["nodes"]), "edges": len(drawn["edges"]),
            "flat_nodes": len(graph["nodes"]), "units": units}
