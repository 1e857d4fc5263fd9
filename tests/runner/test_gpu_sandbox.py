"""A run on a CUDA GPU inside the sandbox (sandbox/gpu.py). CUDA drives NVIDIA's device files
with ioctl and reserves tens of GB of address space as it starts: the first lent GPU machine
showed a sandboxed run failing with "CUDA-capable device(s) is/are busy or unavailable" where
the same script ran plainly. These two hold on any machine; a run on a GPU through the whole
sandbox is tests/web/runs/test_runs_api.py's (skipped without one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from app.runner import sandbox
from app.runner.sandbox import landlock


def _confined(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ,
                                                       "PYTHONPATH": str(sandbox.app_root())})


IOCTL_ON_DEV_NULL = """
    import errno, fcntl, os, termios
    from app.runner.sandbox import landlock
    landlock.restrict(read=[], write=[], {rule}=["/dev/null"])
    fd = os.open("/dev/null", os.O_RDWR)
    try:
        fcntl.ioctl(fd, termios.TCGETS, bytes(64))  # a driver's own ioctl: not a terminal
    except OSError as exc:
        print(errno.errorcode[exc.errno])
"""


@pytest.mark.skipif(landlock.abi_version() < 5, reason="Landlock refuses ioctl from ABI 5 on")
def test_a_device_rule_lets_a_confined_process_drive_the_device_with_ioctl():
    """What the kernel answers /dev/null's own ioctl (ENOTTY: it is no terminal) once the
    driver is reached; EACCES is Landlock refusing before the driver sees it."""
    refused = _confined(IOCTL_ON_DEV_NULL.format(rule="write_files"))
    assert refused.stdout.strip() == "EACCES", refused.stderr
    reached = _confined(IOCTL_ON_DEV_NULL.format(rule="device_files"))
    assert reached.stdout.strip() == "ENOTTY", reached.stderr


def test_a_run_on_cuda_has_no_address_space_cap_and_one_on_the_cpu_has():
    done = _confined("""
        import resource
        from app.runner.sandbox.rlimits import ResourceLimits, apply_job
        apply_job(ResourceLimits(), 10.0, address_space={flag})
        print(resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY)
    """.replace("{flag}", "False"))
    assert done.stdout.strip() == "True", done.stderr
    done = _confined("""
        import resource
        from app.runner.sandbox.rlimits import ResourceLimits, apply_job
        apply_job(ResourceLimits(), 10.0, address_space=True)
        print(resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY)
    """)
    assert done.stdout.strip() == "False", done.stderr

