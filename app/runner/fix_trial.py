"""A fix is offered only as what it did when it ran. After a run whose failure is explained
with an edit of the script (app/trace/failures.py), the edited script runs once more, in a
sandboxed worker with the same limits, and the fix records what happened (`fix["tried"]`): it
ran to the end (and how many backward passes it made), or it still stopped, with what. The page
says "verified" only for the first; a fix that was not tried says so.

The edits come from the worker's report, so they are checked against the script first: each
edit's `before` must be the script's line as it is."""

from __future__ import annotations

from collections.abc import Callable

from app.format import Trace, clip

__all__ = ["apply_edits", "forget_trials", "fixes_to_try", "try_fixes"]

MAX_TRIALS = 1  # one more run per failed run: a forged report cannot ask for more
# failures that are not the script's autograd error: a fix cannot be tried against them (the
# run's limit, a stop, the server), and a report that claims one is not believed
NOT_TRIED = frozenset({"Timeout", "Stopped", "MemoryLimit", "WorkerFailed", "UploadHostLost",
                       "TraceTooLarge", "ServerBusy", "ServerError", "NoGraph", "SyntaxError",
                       "DeviceUnavailable", "InvalidTrace"})


def apply_edits(source: str, edits: list[dict]) -> str | None:
    """`source` with `edits` applied (each line replaced by its `after`), or None when an edit
    does not match the script's line as it is."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for edit in sorted(edits, key=lambda e: -e["line"]):
        n = edit["line"]
        if not (0 < n <= len(lines)) or lines[n - 1] != edit["before"]:
            return None
        lines[n - 1] = edit["after"]
    return "\n".join(lines)


def forget_trials(doc: Trace) -> None:
    """Drop every `tried` the worker's report brought: only the server runs a trial, so a
    report that says its fix was verified is not believed."""
    error = doc.get("error") or {}
    for ex in [error.get("explanation")] + [d.get("explanation")
                                            for d in doc.get("diagnostics") or ()]:
        fix = (ex or {}).get("fix")
        if isinstance(fix, dict):
            fix.pop("tried", None)


def fixes_to_try(doc: Trace) -> list[dict]:
    """The failure's own fix, when the run stopped with an explained error and the fix edits
    the script: a run that ran to the end has nothing to verify (its findings' fixes would
    "run to the end" whatever they changed), and a time-out or a stop is not the script's
    error to fix."""
    error = doc.get("error") or {}
    fix = (error.get("explanation") or {}).get("fix")
    if error.get("type") in NOT_TRIED or not fix or not fix.get("edits"):
        return []
    return [fix]


def try_fixes(doc: Trace, source: str, run: Callable[[str], Trace]) -> None:
    """Run each fix's edited script with `run` (at most MAX_TRIALS) and record in each fix
    what happened; `doc` is changed in place (its diagnostics' copies of a fix too)."""
    for fix in fixes_to_try(doc)[:MAX_TRIALS]:
        edited = apply_edits(source, fix["edits"])
        if edited is None:
            tried = {"ran": False, "why": "its edits do not match the script's lines"}
            _record(doc, fix, tried)
            continue
        try:
            again = run(edited)
        except Exception as exc:  # noqa: BLE001 - no worker for the trial: the run's Trace stays
            tried = {"ran": False,
                     "why": f"no worker could be started for it ({type(exc).__name__})"}
        else:
            err = again.get("error")
            if err and err.get("type") == "Stopped":  # its person stopped the run meanwhile
                _record(doc, fix, {"ran": False, "why": "the run was stopped before it ended"})
                continue
            backwards = sum(1 for e in again.get("events") or () if e.get("kind") == "backward")
            tried = {"ran": True, "error": err["type"] if err else None,
                     "message": clip(err["message"], 500) if err else None,
                     "backwards": backwards}
        _record(doc, fix, tried)


SUGGESTED = "Suggested change: "  # app/trace/failures.py's word for a fix not run yet
VERIFIED = "Fix (run, and the script then ran to the end): "


def _record(doc: Trace, fix: dict, tried: dict) -> None:
    """Put `tried` on `fix` and on every equal copy of it in the document; a finding whose
    fix ran to the end offers it as a fix."""
    error = doc.get("error") or {}
    fix["tried"] = tried
    for d in doc.get("diagnostics") or ():
        other = (d.get("explanation") or {}).get("fix")
        if other is not None and other.get("edits") == fix["edits"]:
            other["tried"] = tried
            if tried.get("ran") and not tried.get("error"):
                d["message"] = d["message"].replace(SUGGESTED, VERIFIED, 1)
    own = (error.get("explanation") or {}).get("fix")
    if own is not None and own.get("edits") == fix["edits"]:
        own["tried"] = tried
