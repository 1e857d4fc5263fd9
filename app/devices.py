"""Device names the user may ask for: `cpu`, `cuda`, `cuda:N`. Torch-free: the CLI and the web
layer check the spelling; the worker (which has torch) checks that the device is there."""

import re

_DEVICE = re.compile(r"cpu|cuda(?::(\d+))?")

__all__ = ["UnknownDevice", "parse_device"]


class UnknownDevice(ValueError):
    """Not a device name at all (a missing device is the worker's to say)."""


def parse_device(text: str) -> str:
    """Return the device name, or raise UnknownDevice with a message a person can act on."""
    value = text.strip().lower()
    if not _DEVICE.fullmatch(value):
        raise UnknownDevice(f"unknown device {text!r}: use cpu, cuda or cuda:N (N a GPU index)")
    return value
