"""What a run on a CUDA GPU must reach inside the sandbox, found on this machine.

NVIDIA's driver is driven through its device files (/dev/nvidiactl, /dev/nvidia0,
/dev/nvidia-uvm, ...): they are opened read-write and spoken to with ioctl, so Landlock must
grant all three on them (ABI 5 and later refuse ioctl on a device unless a rule grants it). The
user-space half of the driver, libcuda.so.1, is loaded the first time CUDA starts, inside the
script, and it opens more of NVIDIA's libraries beside it: their folder must be readable, and
present in a root of the run's own. On a machine without NVIDIA's driver both lists are empty,
and nothing changes. Torch-free: the launcher, which never imports torch, asks too.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

__all__ = ["device_files", "driver_dirs"]

DEVICE_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/*")
DRIVER_PREFIXES = ("libcuda.", "libnvidia-")


def device_files() -> list[str]:
    """NVIDIA's device files on this machine (none without its driver)."""
    found: list[str] = []
    for pattern in DEVICE_PATTERNS:
        found += sorted(p for p in glob.glob(pattern) if not os.path.isdir(p))
    return found


@functools.cache
def driver_dirs() -> list[str]:
    """The folders holding libcuda.so.1 and the NVIDIA libraries it loads, as the dynamic
    loader finds them here (LD_LIBRARY_PATH, ld.so.cache): a container often mounts them
    outside /usr/lib (/usr/local/nvidia/lib64). Empty without NVIDIA's device files."""
    if not device_files():
        return []
    try:
        ctypes.CDLL("libcuda.so.1")  # loaded, not started: no GPU memory is taken
    except OSError:
        return []
    found: list[str] = []
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not os.path.basename(fields[5].strip()).startswith(
                    DRIVER_PREFIXES):
                continue
            path = fields[5].strip()
            for folder in {os.path.dirname(path), os.path.dirname(os.path.realpath(path))}:
                if folder not in found:
                    found.append(folder)
    return found
