"""What measuring each forward's memory costs a script that runs many torch operations before
(or without) a backward: the profiler records from the script start until the last kept pass's
backward, and stops past `MAX_OPERATIONS` (app/trace/forward_memory.py).

Each case runs in a process of its own, traced in-process (`trace_script`, no sandbox) with the
forward memory measured and with it off, then plainly: CPU seconds and the most resident memory
(ru_maxrss) of each. Printed as a Markdown table with measured / off ratios. 200k `y = x + 1`
(two cores, shared): before the bound, measured 12.5 s of CPU and 2.9 GB at most, off 2.8 s and
0.26 GB; with it (50k), 5.9 s and 0.9 GB, the rest of that the profiler's 50k operations and
its stop. Asserts nothing; not part of the test suite.

    .venv/bin/python bench/forward_memory_bound.py [--ops 200000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
mode, path = sys.argv[1], sys.argv[2]
start = time.process_time()
if mode == "plain":
    exec(compile(open(path).read(), path, "exec"), {{"__name__": "__main__"}})
else:
    import functools
    from app.trace import tracer
    if mode == "off":  # trace_script has no switch: a kernel's run_traced(forward_memory=False)
        tracer.run_traced = functools.partial(tracer.run_traced, forward_memory=False)
    tracer.trace_script(path)
print(json.dumps({{"cpu_s": time.process_time() - start,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def script(ops: int, backward: bool) -> str:
    text = f"import torch\nx = torch.ones(10)\nfor _ in range({ops}):\n    y = x + 1\n"
    if backward:
        text += "w = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200_000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backward in (False, True):
            path = Path(tmp) / f"ops_{backward}.py"
            path.write_text(script(args.ops, backward))
            got = {}
            for mode in ("plain", "off", "measured"):
                done = subprocess.run([sys.executable, "-c", ONE.format(root=str(ROOT)), mode,
                                       str(path)], capture_output=True, text=True, check=True)
                got[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append((f"{args.ops} ops, {'then a backward' if backward else 'no backward'}",
                         got))
    print("| script | plain CPU s | traced, off | traced, measured | measured / off | "
          "max RSS MB plain / off / measured |")
    print("|---|---|---|---|---|---|")
    for name, got in rows:
        print(f"| {name} | {got['plain']['cpu_s']:.1f} | {got['off']['cpu_s']:.1f} | "
              f"{got['measured']['cpu_s']:.1f} | "
              f"{got['measured']['cpu_s'] / got['off']['cpu_s']:.2f} | "
              f"{got['plain']['maxrss_mb']:.0f} / {got['off']['maxrss_mb']:.0f} / "
              f"{got['measured']['maxrss_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
