"""One small, thread-safe LRU: every cache in the app is one of these (scenarios' Traces,
drawings, grouping analyses), so eviction and locking are written once.

Not `functools.lru_cache` (it caches a function's calls, and our keys are computed by the
callers) nor a dependency: an `OrderedDict` under a lock is all it takes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LRU"]

V = TypeVar("V")
_MISSING = object()


class LRU(Generic[V]):
    """At most `size` values; a hit makes its key the newest, a put past `size` drops the
    oldest."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"an LRU keeps at least one value (size {size})")
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: V | None = None) -> V | None:
        with self._lock:
            value = self._items.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._items.move_to_end(key)
            return value  # type: ignore[return-value]

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def items(self) -> list[tuple[Hashable, V]]:
        """A snapshot, oldest first; looking does not count as use."""
        with self._lock:
            return list(self._items.items())

    def __iter__(self):
        return iter([key for key, _ in self.items()])

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
