"""RLIMIT_CPU (sandbox/rlimits.py) as a backstop behind the supervisor's wall clock."""

from __future__ import annotations

from tests.runner.test_gpu_sandbox import _confined


def test_the_cpu_backstop_never_comes_before_the_wall_clock_on_every_core():
    """RLIMIT_CPU is a backstop behind the supervisor's wall clock: a script on n threads
    spends n CPU seconds a second, so the cap must cover the wall clock on every core this
    process may run on (it once covered one core: SIGXCPU ended a two-threaded script early)."""
    done = _confined("""
        import os, resource
        from app.runner.sandbox.rlimits import ResourceLimits, apply_job
        apply_job(ResourceLimits(cpu_grace_s=0), 10.0)
        soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
        print(soft >= 10 * len(os.sched_getaffinity(0)), len(os.sched_getaffinity(0)))
    """)
    assert done.stdout.split()[0] == "True", done.stdout + done.stderr
