"""Big models, drawn: autograd-lab against torchviz (and torchview where it is installed), on
the same models in one run. Prints a table; not a timed test.

    .venv/bin/python bench/big_models.py [--only transformer12,lstm200] [--repeat 3]

Models (all from torch.nn): TransformerEncoder with 12, 48 and 96 layers (d_model 32, 4 heads,
dropout on, as a tutorial builds it), an LSTMCell unrolled over 200 steps, and a ResNet-style
CNN. For each, in a fresh process per tool (so peak memory is that tool's):

- autograd-lab: the tracer on the script (in process, the worker's own code path), then the
  first view a user sees (the page's default: a big graph by module, as SVG), then the full flat
  view (every node, SVG). Times from the Trace being ready, as the page gets it.
- torchviz: `make_dot(loss, params=dict(model.named_parameters()))` and its SVG from graphviz.
- torchview (`pip install torchview`; skipped if absent): `draw_graph(...)` of the forward
  module graph, and its SVG. It draws modules, not autograd's nodes: a reference, not a match.
- tracer overhead: the 12-layer model's forward and backward, traced against plain, in one
  process (median of --repeat).

Peak memory is the process's maximum resident set plus graphviz's (`dot` runs as a child).
Every process has a time limit; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PRELUDE = """
import torch
from torch import nn
torch.manual_seed(0)
"""

MODELS = {
    f"transformer{n}": f"""
layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=128)
model = nn.TransformerEncoder(layer, num_layers={n}, enable_nested_tensor=False)
x = torch.randn(16, 4, 32)
def forward():
    return model(x).pow(2).mean()
""" for n in (12, 48, 96)
} | {
    "lstm200": """
model = nn.LSTMCell(16, 32)
head = nn.Linear(32, 1)
xs = torch.randn(200, 4, 16)
def forward():
    h = c = torch.zeros(4, 32)
    for x in xs:
        h, c = model(x, (h, c))
    return head(h).pow(2).mean()
""",
    "resnet": """
class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))

model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                      *[Block(16) for _ in range(16)], nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(16, 10))
x = torch.randn(4, 3, 32, 32)
def forward():
    return model(x).logsumexp(1).mean()
""",
}

# the overhead is also measured on a training-sized batch: the tracer's cost is per node and
# per parameter, the model's grows with the batch
OVERHEAD_MODELS = {
    "transformer12": "the table's input, 16 × 4 tokens",
    "transformer12-batch": "a training batch, 64 × 32 tokens",
}
MODELS["transformer12-batch"] = MODELS["transformer12"].replace(
    "torch.randn(16, 4, 32)", "torch.randn(64, 32, 32)")

TIMEOUT = 300  # per tool and model: a drawing that takes longer is reported as such


def _script(name: str) -> str:
    return PRELUDE + textwrap.dedent(MODELS[name]) + "\nloss = forward()\nloss.backward()\n"


def _peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1024


# -- one measurement, in its own process --------------------------------------------------------

def measure_autograd_lab(name: str) -> dict:
    from app.render import choose_grouping, group_graph, render_graph
    from app.trace.tracer import trace_script

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.py"
        path.write_text(_script(name))
        start = time.perf_counter()
        doc = trace_script(path)
        traced = time.perf_counter() - start
    graph = next(e for e in doc["events"] if e["kind"] == "backward")["graph"]
    start = time.perf_counter()
    grouping = choose_grouping(graph)
    first = group_graph(graph, grouping)
    render_graph(first, "svg")
    first_view = time.perf_counter() - start
    start = time.perf_counter()
    render_graph(graph, "svg")
    flat = time.perf_counter() - start
    return {"nodes": len(graph["nodes"]), "edges": len(graph["edges"]), "trace_s": traced,
            "first_view_s": first_view, "first_view_nodes": len(first["nodes"]),
            "flat_s": flat, "report_mb": len(json.dumps(doc)) / 2**20, "peak_mb": _peak_mb()}


def _build(name: str) -> dict:
    namespace: dict = {}
    exec(PRELUDE + textwrap.dedent(MODELS[name]), namespace)
    return namespace


def measure_torchviz(name: str) -> dict:
    import torchviz

    # torchviz walks the graph recursively: an unrolled LSTM is deeper than Python's default
    # limit of 1,000 frames, which a user of torchviz raises the same way
    sys.setrecursionlimit(100_000)
    ns = _build(name)
    start = time.perf_counter()
    loss = ns["forward"]()
    dot = torchviz.make_dot(loss, params=dict(ns["model"].named_parameters()))
    made = time.perf_counter() - start
    start = time.perf_counter()
    dot.pipe(format="svg")
    drawn = time.perf_counter() - start
    nodes = sum(1 for line in dot.body if "->" not in line and "[label=" in line)
    return {"nodes": nodes, "make_dot_s": made, "svg_s": drawn, "total_s": made + drawn,
            "peak_mb": _peak_mb()}


def measure_torchview(name: str) -> dict:
    try:
        from torchview import draw_graph
    except ImportError:
        return {"skipped": "torchview is not installed (pip install torchview)"}
    ns = _build(name)
    model = ns["model"]
    if name == "lstm200":
        return {"skipped": "torchview draws one call of a module; an unrolled cell is a loop"}
    start = time.perf_counter()
    graph = draw_graph(model, input_data=ns["x"], depth=3, expand_nested=False)
    made = time.perf_counter() - start
    start = time.perf_counter()
    graph.visual_graph.pipe(format="svg")
    drawn = time.perf_counter() - start
    return {"total_s": made + drawn, "peak_mb": _peak_mb()}


def measure_overhead(name: str, repeat: int) -> dict:
    """Forward and backward of the model, plain and traced, in this one process."""
    import torch  # noqa: F401 - imported before timing either

    from app.trace.tracer import trace_script

    script = _script(name)
    plain, traced = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.py"
        path.write_text(script)
        code = compile(script, str(path), "exec")
        for _ in range(repeat + 1):  # the first of each warms caches up
            start = time.perf_counter()
            exec(code, {"__name__": "__main__"})
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            trace_script(path)
            traced.append(time.perf_counter() - start)
    p, t = statistics.median(plain[1:]), statistics.median(traced[1:])
    return {"plain_s": p, "traced_s": t, "ratio": t / p}


TOOLS = {"autograd-lab": measure_autograd_lab, "torchviz": measure_torchviz,
         "torchview": measure_torchview}


def _in_child(tool: str, name: str, repeat: int) -> dict:
    # a session of its own, so that graphviz's `dot` (a grandchild) goes too on a timeout
    child = subprocess.Popen([sys.executable, __file__, "--child", tool, name, "--repeat",
                              str(repeat)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": f"not done in {TIMEOUT} s"}
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _s(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tool, name = args.child
        result = (measure_overhead(name, args.repeat) if tool == "overhead"
                  else TOOLS[tool](name))
        print(json.dumps(result))
        return 0
    names = args.only.split(",") if args.only else [m for m in MODELS
                                                      if m not in OVERHEAD_MODELS or m ==
                                                      "transformer12"]
    rows = []
    for name in names:
        row = {tool: _in_child(tool, name, args.repeat) for tool in TOOLS}
        rows.append((name, row))
        print(f"{name}: {json.dumps(row)}", file=sys.stderr)
    overheads = {m: _in_child("overhead", m, args.repeat) for m in OVERHEAD_MODELS}

    print("| model | autograd nodes | torchviz nodes | trace (s) | first view (s) | nodes in it "
          "| flat view (s) | torchviz make_dot + SVG (s) | flat ÷ torchviz | torchview (s) "
          "| report (MB) | peak MB ours / torchviz |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in rows:
        ours, tv, view = row["autograd-lab"], row["torchviz"], row["torchview"]
        if "error" in ours:
            print(f"| {name} | error: {ours['error']} |")
            continue
        ratio = ours["flat_s"] / tv["total_s"] if "total_s" in tv else None
        viewed = _s(view.get("total_s")) if "total_s" in view else view.get(
            "skipped", view.get("error", "–"))
        tv_nodes = f"{tv['nodes']:,}" if "nodes" in tv else tv.get("error", "–")
        tv_peak = f"{tv['peak_mb']:.0f}" if "peak_mb" in tv else "–"
        print(f"| {name} | {ours['nodes']:,} | {tv_nodes} | {_s(ours['trace_s'])} "
              f"| {_s(ours['first_view_s'])} | {ours['first_view_nodes']} | {_s(ours['flat_s'])} "
              f"| {_s(tv.get('total_s'))} | {_s(ratio)} | {viewed} | {ours['report_mb']:.1f} "
              f"| {ours['peak_mb']:.0f} / {tv_peak} |")
    print("\n| tracer overhead, transformer12 (12 layers), the whole script in one process | "
          "plain (s) | traced (s) | traced ÷ plain |\n|---|---|---|---|")
    for model, what in OVERHEAD_MODELS.items():
        o = overheads[model]
        if "ratio" in o:
            print(f"| {what} | {o['plain_s']:.3f} | {o['traced_s']:.3f} | {o['ratio']:.1f}× |")
        else:
            print(f"| {what} | {o} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
