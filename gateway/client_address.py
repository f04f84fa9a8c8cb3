"""Who a request came from: the socket peer, or the right-most untrusted ``X-Forwarded-For`` hop.

``X-Forwarded-For`` is believed only when the socket peer is one of the policy's
``limits.unauthenticated.trusted_proxies``: then the hops are read right to left (each proxy appends the
address it saw) and the first one outside the trusted networks is the client, as nginx's
``real_ip_recursive`` and Envoy's ``xff_trusted_cidrs`` read them. From any other peer the header is
ignored, since a client can write anything there. An IPv6 client is bucketed by its /64 (one host is
usually given a whole /64, and per-address limits would not bound it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

__all__ = ["MAX_HOPS", "ClientAddresses", "parse_address", "parse_networks"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS = 32
"""``X-Forwarded-For`` hops read at most, from the right (a longer chain is someone's invention)."""
_MAX_NAME = 64


def parse_address(text: str) -> IPAddress | None:
    """An IP address as written in a scope or a forwarded header (``1.2.3.4``, ``1.2.3.4:80``,
    ``[::1]:80``, ``::ffff:1.2.3.4`` read as IPv4); None when it is no address."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else text
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The networks of ``trusted_proxies``; ValueError naming the first that is not a CIDR or address."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"expected a CIDR such as 10.0.0.0/8, got {cidr!r}") from None
    return tuple(networks)


def _bucket(address: IPAddress) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class ClientAddresses:
    """The client of a request under one policy's trusted proxies (built once per policy)."""

    def __init__(self, trusted_proxies: Iterable[str] = ()) -> None:
        self.trusted = parse_networks(trusted_proxies)

    def is_trusted(self, address: IPAddress) -> bool:
        return any(address in network for network in self.trusted)

    def client_of(self, peer: str | None, forwarded_for: str | None = None) -> str:
        """The client a request is counted against: an IPv4 address, an IPv6 /64, or the peer's own
        name when it is no IP address (a Unix socket; ``unknown`` when the server gave none)."""
        address = parse_address(peer) if peer else None
        if address is None:
            return peer[:_MAX_NAME] if peer else "unknown"
        if forwarded_for and self.trusted and self.is_trusted(address):
            for hop in reversed(forwarded_for.split(",")[-MAX_HOPS:]):
                hop_address = parse_address(hop)
                if hop_address is None:
                    break  # not an address: the last hop a trusted proxy vouched for is the client
                address = hop_address
                if not self.is_trusted(hop_address):
                    break  # the right-most untrusted hop
        return _bucket(address)
