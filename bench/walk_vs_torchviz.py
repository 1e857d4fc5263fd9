"""How fast is our graph walk, and what does tracing a whole script cost?

Compares, in one run on the same graphs:
- app.trace.graph.walk (graph as data) against torchviz.make_dot (graph as DOT source);
- a script run plainly (exec) against the same script under the full tracer (trace_script).
Prints times and ratios; asserts nothing.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.trace.graph import walk  # noqa: E402
from app.trace.tracer import trace_script  # noqa: E402


def best_of(fn, repeat=5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def transformer_loss():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
    enc = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    return enc(torch.randn(10, 4, 32)).pow(2).mean()


def chain(n):
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 1.0
    return y


def compare_walks() -> None:
    import torchviz

    print("graph walk: app.trace.graph.walk vs torchviz.make_dot (same graph, no layout)")
    print(f"{'graph':24} {'nodes':>7} {'ours ms':>9} {'torchviz ms':>12} {'ratio':>7}")
    for label, root in [("transformer x4", transformer_loss()), ("chain 900", chain(900)),
                        ("chain 10k", chain(10_000)), ("chain 30k", chain(30_000))]:
        nodes = len(walk([(root, "y")], script_path="", name_leaf=lambda t: ("x", "leaf")).nodes)
        ours = best_of(lambda: walk([(root, "y")], script_path="",
                                    name_leaf=lambda t: ("x", "leaf")), 3)
        if nodes > sys.getrecursionlimit():
            # torchviz walks recursively: it raises RecursionError on graphs this deep, and
            # what it leaves half-built has crashed the interpreter's garbage collector here
            print(f"{label:24} {nodes:7d} {ours * 1e3:9.1f} {'RecursionError':>12} {'-':>7}")
            continue
        theirs = best_of(lambda: torchviz.make_dot(root), 3)
        print(f"{label:24} {nodes:7d} {ours * 1e3:9.1f} {theirs * 1e3:12.1f} "
              f"{ours / theirs:7.2f}")


SCRIPT = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(256, 20), torch.randn(256, 1)
for _ in range({steps}):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
"""


def compare_scripts() -> None:
    print("\nwhole script: plain exec vs traced (first 10 passes recorded)")
    print(f"{'training steps':24} {'plain ms':>9} {'traced ms':>10} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for steps in (1, 10, 200):
            path = Path(tmp) / f"train_{steps}.py"
            path.write_text(textwrap.dedent(SCRIPT.format(steps=steps)))
            code = compile(path.read_text(), str(path), "exec")
            plain = statistics.median(best_of(lambda: exec(code, {"__name__": "__main__"}), 1)
                                      for _ in range(3))
            traced = statistics.median(best_of(lambda: trace_script(path), 1) for _ in range(3))
            print(f"{steps:24d} {plain * 1e3:9.1f} {traced * 1e3:10.1f} {traced / plain:7.2f}")


# Deeper chains than 30k: freeing a graph whose nodes all got Python wrappers recurses in
# torch and overflows the default 8 MB C stack (the worker raises its stack limit).

if __name__ == "__main__":
    torch.set_num_threads(1)
    compare_walks()
    compare_scripts()
