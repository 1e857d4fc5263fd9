"""Run a script as `__main__`, the way `python script.py` would, and turn what goes wrong into
an error record that points at the script's own line (never at ours)."""

from __future__ import annotations

import builtins
import io
import linecache
import sys
import types
from pathlib import Path
from typing import Any

from app.format import ErrorRecord, clip, error_record

__all__ = [
    "TimeLimitExceeded", "CappedText", "main_module", "exec_as_main", "error_from_exception",
    "scrub_frames",
]

MAX_OUTPUT = 256 * 1024


class TimeLimitExceeded(BaseException):
    """Raised in the script when the runner's wall-clock limit is reached (SIGTERM)."""


class CappedText(io.TextIOBase):
    """A text stream that keeps the first MAX_OUTPUT characters and counts the rest. `echo`:
    a stream that gets every write too, as it is written (a kernel's own stdout: what a traced
    cell prints arrives while it runs, not when it ends)."""

    def __init__(self, cap: int = MAX_OUTPUT, echo: Any = None) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._dropped = 0
        self._cap = cap
        self._echo = echo

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        if self._echo is not None:
            self._echo.flush()

    def write(self, text: str) -> int:
        if self._echo is not None:
            self._echo.write(text)
        return self.keep(text)

    def keep(self, text: str) -> int:
        """Keep `text` without echoing it."""
        room = self._cap - self._size
        if room > 0:
            self._parts.append(text[:room])
            self._size += min(len(text), room)
        self._dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def getvalue(self) -> str:
        text = "".join(self._parts)
        if self._dropped:
            text += f"\n[... {self._dropped} more characters of output were not kept]\n"
        return text


_APP_DIR = str(Path(__file__).resolve().parent.parent)


def scrub_frames(text: str) -> str:
    """Drop autograd-lab's own frames (and their code lines) from a formatted stack, such as
    the forward traceback anomaly mode prints when a backward fails: the script's author
    should see their frames and torch's, not ours."""
    out, skip_code = [], False
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith('File "'):
            skip_code = stripped.startswith(f'File "{_APP_DIR}') or \
                stripped.startswith('File "<frozen runpy>"')
            if skip_code:
                continue
        elif skip_code and line.startswith("    "):
            continue
        else:
            skip_code = False
        out.append(line)
    return "".join(out)


def main_module(path: Path) -> types.ModuleType:
    """A fresh module to run the script in, registered as `__main__` (pickle, dataclasses and
    friends look there)."""
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=str(path), __builtins__=builtins)
    sys.modules["__main__"] = module
    return module


def exec_as_main(path: Path, source: str, argv: list[str], module: types.ModuleType) -> None:
    """Execute `source` in `module`; exceptions propagate."""
    # dont_inherit: the script is compiled as Python compiles it, not with this module's own
    # `from __future__ import annotations` (a script whose annotation names nothing would
    # then run here and fail plainly)
    code = compile(source, str(path), "exec", dont_inherit=True)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))
    exec(code, module.__dict__)  # noqa: S102 - running the user's script is the point


MAX_FRAMES = 100   # of a deeper stack, the outermost and innermost halves are kept
REPEATS_SHOWN = 3  # identical frames in a row, as Python's own traceback shows them


def script_frames_of(exc: BaseException, script_path: str) -> list[dict]:
    """The script's frames in the traceback, outermost first, folded the way Python's
    traceback folds them: after three identical frames in a row, the last one counts the rest
    (`repeated`). A plain endless recursion is then a few frames, not a million."""
    frames: list[dict] = []
    same = 0
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == script_path:
            key = (tb.tb_lineno, code.co_name)
            last = frames[-1] if frames else None
            same = same + 1 if last and (last["line"], last["function"]) == key else 1
            if same > REPEATS_SHOWN:
                last["repeated"] = last.get("repeated", 0) + 1
            else:
                frames.append({"line": key[0], "function": key[1]})
        tb = tb.tb_next
    if len(frames) > MAX_FRAMES:  # recursion through several functions does not fold
        half = MAX_FRAMES // 2
        frames = [*frames[:half], {"omitted": len(frames) - 2 * half}, *frames[-half:]]
    for f in frames:
        if "line" in f:
            f["code"] = clip(linecache.getline(script_path, f["line"]).strip(), 1000)
    return frames


def error_from_exception(exc: BaseException, script_path: str) -> ErrorRecord:
    """An error record for an exception the script raised (or we raised into it)."""
    if isinstance(exc, SyntaxError) and (exc.filename in (script_path, None)):
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return error_record("SyntaxError", f"{exc.msg}{where}: {(exc.text or '').strip()}",
                            exc.lineno, frames=[])
    frames = script_frames_of(exc, script_path)
    line = frames[-1]["line"] if frames else None
    if isinstance(exc, TimeLimitExceeded):
        return error_record("Timeout", str(exc), line, frames=frames)
    message = str(exc).strip() or type(exc).__name__
    return error_record(_kind_of(type(exc)), message, line, frames=frames)


# the kinds the worker names itself (no graph, a report too large, a device missing): a
# script's own class of one of these names is told by the full name Python gives the class
# (`__main__.NoGraph`), so the page, the fix trial and the metrics never take it for the
# worker's word
WORKER_KINDS = frozenset({"NoGraph", "TraceTooLarge", "DeviceUnavailable"})


def _kind_of(cls: type) -> str:
    if cls.__name__ in WORKER_KINDS:
        return clip(f"{cls.__module__}.{cls.__qualname__}", 200)
    return cls.__name__
