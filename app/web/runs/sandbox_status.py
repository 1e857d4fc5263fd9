"""What the web app knows about the sandbox uploaded code runs in.

Two sources, both the runner's: which layers this machine offers (known at once, cheap), and
what the start-up self-test found when it tried each layer with hostile probes (known seconds
later; it runs in the background so the server answers at once). /healthz and the "Your code"
page show the same `sandbox_status()`; `auth.py` refuses uploads from other hosts unless every
layer is there and held.
"""

from __future__ import annotations

import logging

from app.runner import SelfTest
from app.runner.sandbox import availability
from app.web.settings import Settings

__all__ = ["announce", "sandbox_status"]

log = logging.getLogger("autograd_lab.web")


def _missing() -> list[str]:
    return [name for name, info in availability().items() if not info["available"]]


def announce(settings: Settings, selftest: SelfTest) -> None:
    """At start-up: say in the log which layers are missing, and start the self-test."""
    layers = availability()
    for name in _missing():
        # warning: shown even when nobody configured logging (Python's last-resort handler)
        log.warning("sandbox layer %s is unavailable here (%s): uploads from other hosts will "
                    "be refused", name, layers[name]["detail"])
    if not settings.selftest:
        log.warning("the sandbox self-test is switched off (AUTOGRAD_LAB_SELFTEST=0): uploads "
                    "from other hosts will be refused")
        return
    selftest.start()


def sandbox_status(settings: Settings, selftest: SelfTest) -> dict:
    """{"state": "done" | "running" | "off", "ok": bool, "summary", "missing", "failing",
    "layers"}: ok only when the self-test ran and every layer held."""
    missing = _missing()
    if not settings.selftest:
        return {"state": "off", "ok": False, "missing": missing, "failing": [], "layers": {},
                "summary": "the sandbox self-test is switched off on this server"
                + (f"; unavailable layers: {', '.join(missing)}" if missing else "")}
    report = selftest.report()
    if report is None:
        return {"state": "running", "ok": False, "missing": missing, "failing": [],
                "layers": {}, "summary": "the sandbox self-test is still running"
                + (f"; unavailable layers: {', '.join(missing)}" if missing else "")}
    return {"state": "done", **report}
