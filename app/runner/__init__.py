"""Run one script in a fresh child process, with limits, and return its Trace document."""

from .process import DEFAULT_TIMEOUT, probe_devices, run_trace

__all__ = ["run_trace", "probe_devices", "DEFAULT_TIMEOUT"]
