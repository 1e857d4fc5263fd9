"""Killing a run's process group, said once: the supervisor, the fork server and its client all
end a run's group this way, and a group that is already gone (or was never ours) is no error."""

from __future__ import annotations

import os
import signal

__all__ = ["kill_group"]


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send `sig` to every process in group `pgid`; False when there was none to signal
    (ProcessLookupError: it has ended; PermissionError: it is no longer ours)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
