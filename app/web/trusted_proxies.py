"""The reverse proxies whose forwarded addresses are believed (the `forwarded_allow_ips`
setting).

Behind a proxy every request arrives from the proxy's address: each per-address limit would
then count the whole course as one person. Requests that come from a trusted proxy take their
client's address from `X-Forwarded-For` (uvicorn's own ProxyHeadersMiddleware does the reading,
create_app installs it), and connections from the proxy are not held to the per-address
connection cap (http/slow_clients.py): it keeps many open for everyone behind it, and the
address they are for is not known until a request's headers arrive. A forwarding header from
any other peer is ignored, as before: anyone can write one.
"""

from __future__ import annotations

import ipaddress

__all__ = ["TrustedProxies"]


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
