"""Run one script in a fresh, sandboxed worker process and return its Trace. Torch-free.

For the web layer and the CLI:
- `trace_in_sandbox(script | source=..., name=..., args=..., device=..., timeout=..., pool=...)`:
  one run, always a Trace document (its `error` explains failures); with a running `Pool`, a
  pre-started worker, else a fresh one;
- `Pool(size).start()` at start-up, `.stop()` at shutdown;
- `ForkServer().start()`: the fork server (`fork_server_process.py`), which imports torch once
  so that a worker starts in a tenth of a second; give it to the pools, `trace_in_sandbox` and the
  self-test (`fork_server_supported()` says whether this machine can have one);
- `Policy` and `ResourceLimits`: which sandbox layers and limits a run gets;
- `probe_devices()`: the devices a worker can use, asked of a worker (torch is the worker's);
- `SelfTest().start()`: the start-up self-test, in the background; its `report()` says which
  sandbox layers this machine has and whether each held (for /healthz and the page).

The names are loaded on first use (PEP 562): the sandbox launcher runs as
`python -S -m app.runner.sandbox.enter`, which imports this package first, without site-packages,
and must not pull in the rest of the runner.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DEFAULT_TIMEOUT": "sandboxed_trace",
    "trace_in_sandbox": "sandboxed_trace",
    "probe_devices": "sandboxed_trace",
    "plain_threads": "sandboxed_trace",
    "NoFreeUid": "sandbox.identity",
    "Pool": "pool",
    "Policy": "sandbox",
    "ResourceLimits": "sandbox",
    "SelfTest": "selftest",
    "availability": "sandbox",
    "bound_all_runs": "sandbox.cgroups",
    "machine_memory": "sandbox.cgroups",
    "ForkServer": "fork_server",
    "fork_server_supported": "fork_server",
    "StartFailures": "start_failures",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
