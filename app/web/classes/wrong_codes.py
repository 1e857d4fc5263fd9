"""Wrong class codes, counted: a code is the way into a class, and a member may run code, so
codes must not be guessed. Per address: past WRONG_CODES_PER_MINUTE in a minute the address is
refused (429) until the minute has passed; on the whole server, from every address together
(many addresses, an IPv6 /48, must not guess either): past WRONG_CODES_PER_MINUTE_IN_ALL. A
browser already in the class asked for is let through, so a room behind one address is not
locked out by one guesser among it. Each web process counts its own."""

from __future__ import annotations

import time
from collections import deque

from app.lru import LRU

from . import state
from .state import ClassError

__all__ = ["WrongCodes"]


class WrongCodes:
    def __init__(self) -> None:
        self._by_address: LRU[deque] = LRU(10_000)  # address -> times of its wrong codes
        self._in_all: deque = deque()  # times of every wrong code, the last minute's

    def check(self, address: str, member: bool) -> None:
        """Refuse (429) an address, or everyone, past the minute's wrong codes, unless the
        browser asking is a member of the class it names."""
        if member:
            return
        now = time.monotonic()
        self._forget(now)
        if len(self._in_all) >= state.WRONG_CODES_PER_MINUTE_IN_ALL:
            raise ClassError(429, f"{state.WRONG_CODES_PER_MINUTE_IN_ALL} wrong class codes were "
                                  "tried on this server in the last minute (someone is "
                                  "guessing): wait a minute, then open the class's link again",
                             "too_many_codes", headers={"Retry-After": "60"})
        if self._recent(address, now) >= state.WRONG_CODES_PER_MINUTE:
            raise ClassError(429, f"{state.WRONG_CODES_PER_MINUTE} wrong class codes came from "
                                  "this address in a minute: wait a minute, then check the "
                                  "code with the teacher", "too_many_codes",
                             headers={"Retry-After": "60"})

    def guessing(self, address: str) -> bool:
        """Would `check` refuse this address now? (Then a shared classroom need not ask its
        table for the code at all.)"""
        now = time.monotonic()
        self._forget(now)
        return len(self._in_all) >= state.WRONG_CODES_PER_MINUTE_IN_ALL or \
            self._recent(address, now) >= state.WRONG_CODES_PER_MINUTE

    def miss(self, address: str) -> None:
        """Count a wrong code from `address`."""
        now = time.monotonic()
        self._in_all.append(now)
        if address:
            misses = self._by_address.get(address)
            if misses is None:
                misses = deque()
                self._by_address.put(address, misses)
            misses.append(now)

    def _forget(self, now: float) -> None:
        while self._in_all and now - self._in_all[0] > 60:
            self._in_all.popleft()

    def _recent(self, address: str, now: float) -> int:
        misses = self._by_address.get(address) if address else None
        if not misses:
            return 0
        while misses and now - misses[0] > 60:
            misses.popleft()
        return len(misses)
