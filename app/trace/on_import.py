"""Call a function the moment a module is first imported, however the script imports it.

The tracer patches what some optional modules offer (matplotlib's `show` and `savefig`,
torchviz's `make_dot`). Importing them first only to patch them costs every run that never
uses them (matplotlib 0.6 s of CPU, torchviz 0.13 s: issue 36), and a script may import them
in a way no reading of its source foresees (`importlib.import_module('matp' + 'lotlib')`).
So they are patched when the import happens: a finder first on `sys.meta_path` finds the
module as the finders after it would, and runs the waiting functions once the module's own
code has run, before the importing statement gets the module.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from importlib.abc import Loader, MetaPathFinder
from types import ModuleType
from typing import Any

__all__ = ["on_import"]

_lock = threading.Lock()
_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}
_finding = threading.local()  # the names this thread is finding now (the finders after ours)


def on_import(name: str, then: Callable[[ModuleType], None]) -> Callable[[], None]:
    """`then(module)` once the module `name` (a full dotted name) has been imported and run;
    returns what cancels it. Not called for a module already imported (look first in
    `sys.modules`). An exception from `then` is not the importing script's: it is dropped."""
    with _lock:
        _waiting.setdefault(name, []).append(then)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)

    def cancel() -> None:
        with _lock:
            waiting = _waiting.get(name, [])
            if then in waiting:
                waiting.remove(then)
            if not waiting:
                _waiting.pop(name, None)
            if not _waiting and _FINDER in sys.meta_path:
                sys.meta_path.remove(_FINDER)

    return cancel


class _Finder(MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _waiting:
            return None
        finding = getattr(_finding, "names", None)
        if finding is None:
            finding = _finding.names = set()
        if fullname in finding:
            return None
        finding.add(fullname)
        try:
            spec = _spec_from_the_others(fullname, path, target)
        finally:
            finding.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not found (the import fails as it would), or nothing to run
        spec.loader = _Announcing(spec.loader, fullname)
        return spec


def _spec_from_the_others(fullname: str, path: Any, target: Any) -> Any:
    for finder in list(sys.meta_path):
        if finder is _FINDER or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class _Announcing(Loader):
    """The module's own loader, and then the waiting functions."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # the module sees its own loader, as without us (its resources are read through it)
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        with _lock:
            waiting = _waiting.pop(self.name, [])
            if not _waiting and _FINDER in sys.meta_path:
                sys.meta_path.remove(_FINDER)
        for then in waiting:
            try:
                then(sys.modules.get(self.name, module))
            except Exception:  # noqa: BLE001, S110 - our patching never breaks the script's import
                pass


_FINDER = _Finder()
