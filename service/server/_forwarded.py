"""The client's address: the connection's peer, or the address a trusted proxy forwarded.

A request that came through proxies names the client in ``Forwarded: for=`` (RFC 7239) or in
``X-Forwarded-For``, each hop appending the address it got the request from. Anyone can send
either header, so they are believed only from a peer in ``trusted_proxies``, and only as far
as trusted hops wrote them: read from the right, the first address that is not a trusted proxy
is the client (an entry further left was written by that client, or by whoever it claims sent
it). ``Forwarded`` wins when both came; an entry that must be read and is not an address
(``unknown``, an obfuscated name, garbage) gives the peer instead: the last address known.

Nothing is parsed for a peer that is not trusted (most deployments: an empty list), and a
trusted peer's verdict is kept (``Proxies.trusts``), so the usual request pays one dict lookup.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from .http import Head

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# Peers whose verdict is kept (a proxy's connections come from few addresses); cleared when full.
_KEPT = 1024


class Proxies:
    """The trusted proxies: which peers may name the client, and the client they name."""

    def __init__(self, networks: Iterable[Network]) -> None:
        self.networks = tuple(networks)
        self._peers: dict[str, bool] = {}

    def client(self, head: Head) -> str | None:
        """The client's address for the access log: the peer's, or the one forwarded."""
        peer = head.peer
        if peer is None or not self.trusts(peer):
            return peer
        if head.forwarded is not None:
            hops = forwarded_for(head.forwarded)
        elif head.forwarded_for is not None:
            hops = x_forwarded_for(head.forwarded_for)
        else:
            return peer
        return self.nearest_untrusted(hops) or peer

    def trusts(self, peer: str) -> bool:
        trusted = self._peers.get(peer)
        if trusted is None:
            address = parse_address(peer)
            trusted = address is not None and self.within(address)
            if len(self._peers) >= _KEPT:
                self._peers.clear()
            self._peers[peer] = trusted
        return trusted

    def within(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 peer
        return any(address in network for network in self.networks)

    def nearest_untrusted(self, hops: list[str]) -> str | None:
        """The rightmost hop that is not a trusted proxy; the leftmost when all are; None when
        a hop read on the way is not an address."""
        found: Address | None = None
        for hop in reversed(hops):
            found = parse_node(hop)
            if found is None:
                return None
            if not self.within(found):
                break
        return None if found is None else str(found)


def forwarded_for(value: bytes) -> list[str]:
    """The ``for=`` node of each element of a ``Forwarded`` value, in order ("" when an
    element has none, or its pairs cannot be read)."""
    nodes = []
    for element in value.decode("latin-1").split(","):
        node = ""
        for pair in element.split(";"):
            name, eq, node_value = pair.strip().partition("=")
            if eq and name.lower() == "for":
                if len(node_value) >= 2 and node_value[0] == node_value[-1] == '"':
                    node_value = node_value[1:-1]  # a quoted-string (IPv6, or with a port)
                node = node_value
                break
        nodes.append(node)
    return nodes


def x_forwarded_for(value: bytes) -> list[str]:
    """The entries of an ``X-Forwarded-For`` value, in order."""
    return [entry.strip() for entry in value.decode("latin-1").split(",")]


def parse_node(node: str) -> Address | None:
    """An address as proxies write it: ``192.0.2.1``, ``192.0.2.1:4711``, ``2001:db8::1``,
    ``[2001:db8::1]`` or ``[2001:db8::1]:4711``; None for anything else."""
    if node.startswith("["):
        inside, bracket, port = node[1:].partition("]")
        if not bracket or (port and not _port(port)):
            return None
        address = parse_address(inside)
        return address if isinstance(address, ipaddress.IPv6Address) else None
    if node.count(":") == 1:  # IPv4 and a port
        host, _, port = node.partition(":")
        address = parse_address(host)
        return address if isinstance(address, ipaddress.IPv4Address) and _port(":" + port) else None
    return parse_address(node)


def _port(text: str) -> bool:
    # RFC 7239 also allows an obfuscated port ("_x"); a port is never the part that matters.
    port = text[1:]
    return text[:1] == ":" and port.isascii() and (port.isdigit() or port[:1] == "_")


def parse_address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
