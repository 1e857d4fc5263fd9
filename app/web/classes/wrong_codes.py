"""Wrong class codes, counted: a code is the way into a class, and a member may run code, so
codes must not be guessed. Per address: past WRONG_CODES_PER_MINUTE in a minute the address is
refused (429) until the minute has passed. A browser already in the class asked for is let
through, so a room behind one address is not locked out by one guesser among it.

On the whole server too, many addresses (an IPv6 /48 is 65,536 /64s) must not guess either:
past WRONG_CODES_PER_MINUTE_IN_ALL from every address together, the server refuses a code from
any neighbourhood (an IPv4 address, an IPv6 /48) that tried a wrong one in the last minute. A
newcomer from anywhere else still gets in (issue 38: 21 guessing addresses once locked every
newcomer out for a minute); a guesser then gets one try per neighbourhood a minute. Each web
process counts its own."""

from __future__ import annotations

import ipaddress
import time
from collections import deque

from app.lru import LRU

from . import state
from .state import ClassError

__all__ = ["WrongCodes", "neighbourhood"]


def neighbourhood(address: str) -> str:
    """Where one guesser's addresses lie: an IPv6 address or /64 key's /48 (a site's usual
    allocation), an IPv4 address itself; anything else as it is."""
    try:
        network = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return address
    if network.version == 6 and network.prefixlen >= 48:
        return str(network.supernet(new_prefix=48))
    return str(network)


class WrongCodes:
    def __init__(self) -> None:
        self._by_address: LRU[deque] = LRU(10_000)  # address -> times of its wrong codes
        self._by_neighbourhood: LRU[deque] = LRU(10_000)  # its /48 (IPv6) -> the same
        self._in_all: deque = deque()  # times of every wrong code, the last minute's

    def check(self, address: str, member: bool) -> None:
        """Refuse (429) an address past its minute's wrong codes, or one whose neighbourhood
        guessed while the whole server is past its own, unless the browser asking is a member
        of the class it names."""
        if member:
            return
        now = time.monotonic()
        self._forget(now)
        if self._server_refuses(address, now):
            raise ClassError(429, f"{state.WRONG_CODES_PER_MINUTE_IN_ALL} wrong class codes were "
                                  "tried on this server in the last minute (someone is "
                                  "guessing), some from your network: wait a minute, then "
                                  "open the class's link again", "too_many_codes",
                             headers={"Retry-After": "60"})
        if _recent(self._by_address, address, now) >= state.WRONG_CODES_PER_MINUTE:
            raise ClassError(429, f"{state.WRONG_CODES_PER_MINUTE} wrong class codes came from "
                                  "this address in a minute: wait a minute, then check the "
                                  "code with the teacher", "too_many_codes",
                             headers={"Retry-After": "60"})

    def guessing(self, address: str) -> bool:
        """Would `check` refuse this address now? (Then a shared classroom need not ask its
        table for the code at all.)"""
        now = time.monotonic()
        self._forget(now)
        return self._server_refuses(address, now) or \
            _recent(self._by_address, address, now) >= state.WRONG_CODES_PER_MINUTE

    def miss(self, address: str) -> None:
        """Count a wrong code from `address`."""
        now = time.monotonic()
        self._in_all.append(now)
        if address:
            _count(self._by_address, address, now)
            _count(self._by_neighbourhood, neighbourhood(address), now)

    def _server_refuses(self, address: str, now: float) -> bool:
        return len(self._in_all) >= state.WRONG_CODES_PER_MINUTE_IN_ALL and \
            (not address or _recent(self._by_neighbourhood, neighbourhood(address), now) > 0)

    def _forget(self, now: float) -> None:
        while self._in_all and now - self._in_all[0] > 60:
            self._in_all.popleft()


def _count(times: LRU, key: str, now: float) -> None:
    misses = times.get(key)
    if misses is None:
        misses = deque()
        times.put(key, misses)
    misses.append(now)


def _recent(times: LRU, key: str, now: float) -> int:
    misses = times.get(key) if key else None
    if not misses:
        return 0
    while misses and now - misses[0] > 60:
        misses.popleft()
    return len(misses)
