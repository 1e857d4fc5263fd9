"""What a client key is, without HTTP: a browser's signed session cookie (`cookie:…`) or an
address standing in for a person (`address:…`), and the address key every per-address limit
counts by. The request side (reading the cookie, signing it) is app/web/http/clients.py; the
classes and the run book only read keys."""

from __future__ import annotations

import ipaddress

__all__ = ["address_key", "is_browser"]


def is_browser(client: str) -> bool:
    """Is this client key a browser's session cookie, not an address standing in for one (a
    program, or a browser's very first page load: its cookie comes with the answer)?"""
    return client.startswith("cookie:")


def address_key(host: str, loopback_apart: bool = False) -> str:
    """One key per place a person can be: an IPv4 address (also when written as IPv6,
    ::ffff:a.b.c.d), or an IPv6 /64, since one machine commonly holds a whole /64. All of
    loopback (127.0.0.0/8, ::1) is one place, 127.0.0.1: any local user of a shared machine
    can bind any of its addresses, so each must not be another person's share (issue 38).
    `loopback_apart` (the setting `loopback_addresses_apart`) keeps them apart, for tests
    that stand for many machines on one."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback and not loopback_apart:
        return "127.0.0.1"
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)
