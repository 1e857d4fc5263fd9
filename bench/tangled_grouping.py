"""A forged graph tangled between its modules (issue 38, point 1): what the readable grouping
draws of it, and what graphviz makes of that, before and after the bound on edges between
boxes. Prints a table; not a timed test.

    .venv/bin/python bench/tangled_grouping.py [--cap 60] [--nodes 20000] [--edges 60000]

The graph: `--nodes` ops in 92 top modules of 12 children each (the readable grouping is depth
1: 92 boxes), `--edges` edges at random. "before" is the grouping by units alone, drawn by
graphviz with `--cap` seconds (the server gave a graph of up to 300 nodes 60); "after" is what
`render_graph` does now: a drawing refused at once with what to do instead. Also a real-sized
model for contrast: a chain of blocks, whose grouping is unchanged; and a graph tangled at
depth 2 only, drawn at depth 1 now (`coarser`).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.render import RenderError, render_graph  # noqa: E402
from app.render.group import analyze, group_graph, readable_grouping  # noqa: E402


def tangled(nodes: int, edges: int, tops: int = 92, children: int = 12) -> dict:
    rng = random.Random(0)
    ops = [{"id": f"n{i}", "name": f"Op{i}", "kind": "op",
            "module": f"m{i % tops}x.c{(i // tops) % children}x"} for i in range(nodes)]
    return {"roots": ["n0"], "nodes": ops, "edges": [
        {"source": f"n{rng.randrange(nodes)}", "target": f"n{rng.randrange(nodes)}", "slot": k}
        for k in range(edges)]}


def tangled_deeper(tops: int = 10, children: int = 25, edges: int = 3000) -> dict:
    """250 boxes at depth 2 with about 2,900 edges between them; 10 at depth 1."""
    rng = random.Random(0)
    ops = [{"id": f"n{i}", "name": f"Op{i}", "kind": "op",
            "module": f"m{i % tops}.c{(i // tops) % children}x"}
           for i in range(tops * children * 2)]
    return {"roots": ["n0"], "nodes": ops, "edges": [
        {"source": f"n{rng.randrange(len(ops))}", "target": f"n{rng.randrange(len(ops))}",
         "slot": k} for k in range(edges)]}


def chain(blocks: int = 200, per: int = 12) -> dict:
    ops = [{"id": f"n{i}", "name": f"Op{i}", "kind": "op",  # no two blocks alike: no folds
            "module": f"blocks.{i // per}.part{i % 3}"} for i in range(blocks * per)]
    return {"roots": ["n0"], "nodes": ops, "edges": [
        {"source": f"n{i + 1}", "target": f"n{i}", "slot": 0} for i in range(len(ops) - 1)]}


def draw(graph: dict, cap: float) -> str:
    started = time.monotonic()
    try:
        render_graph(graph, "svg", timeout=cap)
    except RenderError as exc:
        took = time.monotonic() - started
        return f"refused in {took:.2f} s: {str(exc)[:70]}"
    return f"drawn in {time.monotonic() - started:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=60_000)
    args = parser.parse_args()
    for name, graph in (("tangled forgery", tangled(args.nodes, args.edges)),
                        ("tangled at depth 2", tangled_deeper()),
                        ("chain of 200 blocks", chain())):
        analysis = analyze(graph)
        for label, limit in (("before", 10**9), ("after", None)):
            kw = {} if limit is None else {"edge_limit": limit}
            started = time.monotonic()
            grouping = readable_grouping(graph, analysis=analysis, **kw)
            chose = time.monotonic() - started
            drawn = group_graph(graph, grouping, analysis)
            if label == "before":  # drawn as before: no refusal of a tangled grouping
                drawn = {**drawn}
                drawn.pop("grouping")
            print(f"{name:20} {label:6} depth {grouping.depth} coarser={grouping.coarser}: "
                  f"{len(drawn['nodes'])} boxes, {len(drawn['edges'])} edges "
                  f"(chosen in {chose:.2f} s); {draw(drawn, args.cap)}", flush=True)


if __name__ == "__main__":
    main()
