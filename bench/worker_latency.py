"""How long a small script's trace takes: a fresh sandboxed worker, a pre-started (pooled) one,
and - the baseline "other tool" - plain `python script.py` of the same script, no tracing, no
sandbox. One run of this file measures all of them on the same machine.

    .venv/bin/python bench/worker_latency.py [--repeat 5]

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.runner import Policy, Pool, trace_in_sandbox  # noqa: E402

SCRIPT = """\
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for _ in range(3):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print(float(loss))
"""


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _check(doc: dict) -> None:
    if doc["error"]:
        raise SystemExit(f"the trace failed: {doc['error']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    n = parser.parse_args().repeat

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.py"
        path.write_text(SCRIPT)
        plain = [_timed(lambda: subprocess.run([sys.executable, str(path)], check=True,
                                               capture_output=True)) for _ in range(n)]

    cold = [_timed(lambda: _check(trace_in_sandbox(source=SCRIPT, name="small.py", timeout=120)))
            for _ in range(n)]
    bare = Policy(namespaces=False, own_uid=False, landlock=False, rlimits=False)
    cold_bare = [_timed(lambda: _check(trace_in_sandbox(source=SCRIPT, name="small.py", timeout=120,
                                                 policy=bare))) for _ in range(n)]

    pooled = []
    with Pool(size=2) as pool:
        for _ in range(n):
            deadline = time.monotonic() + 120
            while pool.idle() < pool.size and time.monotonic() < deadline:
                time.sleep(0.05)  # warm workers wait and none is starting: an idle server
            pooled.append(_timed(lambda: _check(trace_in_sandbox(
                pool=pool, source=SCRIPT, name="small.py", timeout=120, wait=0.1))))

    rows = [("plain `python script.py` (no trace, no sandbox)", plain),
            ("cold trace_in_sandbox, no sandbox layers", cold_bare),
            ("cold trace_in_sandbox, full sandbox (fresh worker)", cold),
            ("pooled trace_in_sandbox, full sandbox (pre-started worker)", pooled)]
    base = statistics.median(plain)
    print(f"small script ({len(SCRIPT.splitlines())} lines, 3 backward + 3 steps), "
          f"median of {n} runs each")
    for label, times in rows:
        med = statistics.median(times)
        print(f"  {label:55s} {med:6.3f} s  (min {min(times):.3f})  x{med / base:5.2f} plain")
    print(f"  pooled is {statistics.median(cold) / statistics.median(pooled):.1f}x faster than "
          "cold with the same sandbox")


if __name__ == "__main__":
    main()
