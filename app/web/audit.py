"""Audit lines: one log line for each action that changes who may do what here (a class started
or ended, a member removed, a run stopped from the admin page) and each token refused, on the
logger `autograd_lab.audit`, with the request's id (http/request_ids.py).

A line is `EVENT key=value ... request=ID`. Values come from requests (a path, an alias), so
each is cut to 200 characters and written as a JSON string where it holds anything but plain
characters: a newline in a path cannot start a line that looks like another action's."""

from __future__ import annotations

import json
import logging
import re

from .http.request_ids import request_id

__all__ = ["audit", "install_audit_log"]

log = logging.getLogger("autograd_lab.audit")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+-]{1,200}")


def audit(event: str, **fields: object) -> None:
    parts = [event, *(f"{key}={_value(value)}" for key, value in fields.items()),
             f"request={request_id() or '-'}"]
    log.info(" ".join(parts))


def _value(value: object) -> str:
    text = str(value)[:200]
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


def install_audit_log() -> None:
    """Where nobody configured the audit logger, its lines go to standard error (uvicorn's
    own logging configures only uvicorn's loggers): an operator's configuration, if any, wins."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)  # a root logger at WARNING would drop every line
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s audit %(message)s"))
    log.addHandler(handler)
    log.propagate = False
