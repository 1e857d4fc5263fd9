"""The reverse proxies whose forwarded addresses are believed (the `forwarded_allow_ips`
setting).

Behind a proxy every request arrives from the proxy's address: each per-address limit would
then count the whole course as one person. Requests that come from a trusted proxy take their
client's address from `X-Forwarded-For` (uvicorn's own ProxyHeadersMiddleware does the reading,
create_app installs it), and connections from the proxy are not held to the per-address
connection cap (http/slow_clients.py): it keeps many open for everyone behind it, and the
address they are for is not known until a request's headers arrive. A forwarding header from
any other peer is ignored, as before: anyone can write one.

A proxy on the server's own machine is trusted by a loopback address, and then so is every
local user, who can connect to the app's port past the proxy and write the header: on a shared
machine that makes each of them as many people as they like. `trusts_local_users` says so, and
the server warns at start.
"""

from __future__ import annotations

import ipaddress
import logging

__all__ = ["TrustedProxies", "warn_if_local_users_trusted"]

log = logging.getLogger("autograd_lab.web")


class TrustedProxies:
    """Addresses and networks (`10.0.0.5, 192.168.0.0/16`), or `*` for every peer."""

    def __init__(self, spec: str) -> None:
        items = [item.strip() for item in spec.split(",") if item.strip()]
        self.everyone = "*" in items
        self.networks = []
        for item in items:
            if item != "*":
                self.networks.append(ipaddress.ip_network(item, strict=False))  # ValueError

    def __bool__(self) -> bool:
        return self.everyone or bool(self.networks)

    def __contains__(self, host: str) -> bool:
        if self.everyone:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if getattr(address, "ipv4_mapped", None):
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def trusts_local_users(self) -> bool:
        """Is any loopback address trusted (so any user of this machine may forward)?"""
        return self.everyone or any(n.overlaps(ipaddress.ip_network("127.0.0.0/8"))
                                    if n.version == 4 else n.overlaps(
                                        ipaddress.ip_network("::1/128"))
                                    for n in self.networks)


def warn_if_local_users_trusted(spec: str) -> None:
    """At start: a warning where forwarded_allow_ips trusts loopback (see the module's note)."""
    if spec and TrustedProxies(spec).trusts_local_users():
        log.warning("forwarded_allow_ips (%s) trusts this machine's own addresses: any user of "
                    "this machine can connect to the app's port directly and name any address "
                    "in X-Forwarded-For, and be counted as that many people. On a machine "
                    "others log in to, let only the proxy reach the app (a port nobody else "
                    "may open, or a firewall rule for the proxy's user)", spec)
