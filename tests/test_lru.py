"""The one LRU every cache uses: the least recently used key goes first, a hit counts as use."""

import threading

import pytest

from app.lru import LRU


def test_the_least_recently_used_goes_first_and_a_hit_is_a_use():
    cache: LRU[int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now newer than "b"
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2
    assert cache.get("b", "gone") == "gone"


def test_a_put_again_refreshes_and_replaces():
    cache: LRU[int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.get("a") == 10 and "b" not in cache


def test_threads_never_leave_it_over_size():
    cache: LRU[int] = LRU(8)

    def fill(base: int) -> None:
        for i in range(2000):
            cache.put((base, i), i)
            cache.get((base, i - 1))

    threads = [threading.Thread(target=fill, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 8


def test_size_zero_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        LRU(0)


def test_looking_at_the_items_is_not_a_use():
    cache: LRU[int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.items() == [("a", 1), ("b", 2)] and list(cache) == ["a", "b"]
    cache.put("c", 3)
    assert list(cache) == ["b", "c"]
