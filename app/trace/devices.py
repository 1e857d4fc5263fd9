"""The devices torch can use here, and why a requested one cannot be used.

`python -m app.trace.devices` prints the torch version and the devices as JSON: the web process
asks this of a worker, since it does not import torch itself.
"""

from __future__ import annotations

import json
import re

import torch

__all__ = ["available_devices", "device_problem"]


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return found


def device_problem(device: str) -> str | None:
    """Why `device` cannot be used here, or None when it can."""
    if device == "cpu":
        return None
    m = re.fullmatch(r"cuda(?::(\d+))?", device)
    if m is None:
        return f"unknown device {device!r}: use cpu, cuda or cuda:N"
    if not torch.cuda.is_available():
        return (f"device {device!r} is not available: this machine has no CUDA GPU that torch "
                f"{torch.__version__} can use (torch.cuda.is_available() is False). "
                "Run it on the CPU instead (device cpu).")
    index = int(m.group(1) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        return (f"device {device!r} does not exist: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}.")
    return None


if __name__ == "__main__":
    print(json.dumps({"torch": torch.__version__, "devices": available_devices()}))
