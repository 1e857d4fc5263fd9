"""Run one script in a fresh, sandboxed child process, with limits, and return its Trace.

For the web layer:
- `run_trace(script | source=..., name=..., args=..., device=..., timeout=...)`: one run,
  always a Trace document (its `error` explains failures); uses the default pool if running;
- `Pool(size).start(default=True)` at start-up, `.stop()` at shutdown; `.acquire(timeout)`;
- `sandbox_report()`: which sandbox layers this machine has and whether each held in the
  start-up self-test (for /healthz and the page); `start_selftest()` runs it in the background.
"""

from .pool import Pool, default_pool
from .process import DEFAULT_TIMEOUT, probe_devices, run_trace
from .sandbox import Limits, Policy
from .selftest import sandbox_report, start_selftest

__all__ = [
           "DEFAULT_TIMEOUT",
           "Limits",
           "Policy",
           "Pool",
           "default_pool",
           "probe_devices",
           "run_trace",
           "sandbox_report",
           "start_selftest",
]
