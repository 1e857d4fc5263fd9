"""Where the server's own log lines go when nobody configured them.

uvicorn's logging configures only uvicorn's loggers, so the audit log's and the access log's
counting lines would reach nobody (a root logger at WARNING drops INFO). Each goes to standard
error, which systemd and compose keep, unless an operator's configuration exists: theirs wins."""

from __future__ import annotations

import logging

__all__ = ["to_stderr_unless_configured"]


def to_stderr_unless_configured(log: logging.Logger, label: str) -> None:
    """`log`'s INFO lines go to standard error as "TIME LABEL message", unless the logger or
    the root logger already has a handler (then only its level is set, where unset)."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)  # a root logger at WARNING would drop every line
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"%(asctime)s {label} %(message)s"))
    log.addHandler(handler)
    log.propagate = False
