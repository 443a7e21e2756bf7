"""The client's address (``_forwarded``): the peer's, unless the peer is a trusted proxy;
then the rightmost address of ``Forwarded`` (RFC 7239) or ``X-Forwarded-For`` that is not one
of the trusted proxies."""

from __future__ import annotations

import ipaddress

import pydantic
import pytest

from sealflow.service.config import Settings, networks
from sealflow.service.server._forwarded import Proxies, forwarded_for, parse_node
from sealflow.service.server.http import Head

PROXIES = Proxies(networks("127.0.0.1, 10.0.0.0/8, fd00::/8"))


def client(
    peer: str | None, *headers: tuple[bytes, bytes], proxies: Proxies = PROXIES
) -> str | None:
    head = Head("GET", b"/healthz", b"", "/healthz", peer)
    for name, value in headers:
        head.add(name, value)
    return proxies.client(head.complete())


def xff(value: str) -> tuple[bytes, bytes]:
    return b"x-forwarded-for", value.encode("latin-1")


def fwd(value: str) -> tuple[bytes, bytes]:
    return b"forwarded", value.encode("latin-1")


def test_an_untrusted_peer_is_the_client_whatever_it_claims() -> None:
    assert client("198.51.100.7") == "198.51.100.7"
    assert client("198.51.100.7", xff("203.0.113.9")) == "198.51.100.7"
    assert client("198.51.100.7", fwd("for=203.0.113.9")) == "198.51.100.7"
    assert client("10.0.0.1", xff("203.0.113.9"), proxies=Proxies(())) == "10.0.0.1"
    assert client(None, xff("203.0.113.9")) is None  # no peer known (a Unix socket)


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        ("203.0.113.9", "203.0.113.9"),
        ("203.0.113.9, 10.1.2.3", "203.0.113.9"),  # a second trusted hop is skipped
        ("1.1.1.1, 203.0.113.9, 10.1.2.3", "203.0.113.9"),  # a client's own claim is not read
        ("garbage, 203.0.113.9", "203.0.113.9"),  # nor its garbage
        ("10.9.9.9, 10.1.2.3", "10.9.9.9"),  # all trusted: the leftmost
        ("203.0.113.9:4711", "203.0.113.9"),  # with a port
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]:4711", "2001:db8::1"),
        ("[2001:DB8:0::1]", "2001:db8::1"),  # written the one way
        ("203.0.113.9,10.1.2.3", "203.0.113.9"),
        ("unknown", "127.0.0.1"),  # not an address: the peer
        ("203.0.113.9, junk", "127.0.0.1"),  # the hop that must be read is not one
        ("", "127.0.0.1"),
        ("203.0.113.9, ", "127.0.0.1"),
        ("203.0.113.9:x", "127.0.0.1"),
        ("[203.0.113.9]", "127.0.0.1"),  # brackets are IPv6's
        ("2001:db8::1:80", "2001:db8::1:80"),  # an IPv6 address, not one with a port
        ("010.0.0.1", "127.0.0.1"),  # leading zeros: not an address
    ],
)
def test_x_forwarded_for_from_a_trusted_peer(chain: str, expected: str) -> None:
    assert client("127.0.0.1", xff(chain)) == expected


def test_lines_of_a_header_are_one_list_in_order() -> None:
    assert client("127.0.0.1", xff("203.0.113.9"), xff("198.51.100.7")) == "198.51.100.7"
    assert client("127.0.0.1", xff("203.0.113.9"), xff("10.1.1.1")) == "203.0.113.9"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # RFC 7239's own examples (section 4 and 7.1).
        ('for="_gazonk"', "127.0.0.1"),  # obfuscated: the peer
        ('For="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
        ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
        ("for=192.0.2.43, for=198.51.100.17", "198.51.100.17"),
        ("for=192.0.2.43, for=10.0.0.5", "192.0.2.43"),
        ('for="192.0.2.43:47011"', "192.0.2.43"),
        ("for=unknown", "127.0.0.1"),
        ("proto=https;by=10.0.0.1", "127.0.0.1"),  # no for=
        ("for = 192.0.2.1", "127.0.0.1"),  # no spaces around '='
        ('for="192.0.2.1', "127.0.0.1"),  # an unclosed quote
        ("by=10.0.0.2; for=192.0.2.9 ;proto=http", "192.0.2.9"),
        ("for=192.0.2.9, for=garbage, for=10.0.0.3", "127.0.0.1"),
        ("for=garbage, for=192.0.2.9, for=10.0.0.3", "192.0.2.9"),
    ],
)
def test_forwarded_from_a_trusted_peer(value: str, expected: str) -> None:
    assert client("127.0.0.1", fwd(value)) == expected


def test_forwarded_wins_over_x_forwarded_for_even_when_unreadable() -> None:
    assert client("127.0.0.1", xff("198.51.100.1"), fwd("for=192.0.2.9")) == "192.0.2.9"
    assert client("127.0.0.1", fwd("for=unknown"), xff("198.51.100.1")) == "127.0.0.1"


def test_a_trusted_peer_seen_over_ipv6_or_as_a_mapped_ipv4_address() -> None:
    assert client("::ffff:127.0.0.1", xff("203.0.113.9")) == "203.0.113.9"
    assert client("fd00::5", xff("203.0.113.9")) == "203.0.113.9"
    assert client("fe80::1", xff("203.0.113.9")) == "fe80::1"
    assert client("::ffff:10.0.0.1", xff("::ffff:10.0.0.2, 2001:db8::9")) == "2001:db8::9"
    assert client("127.0.0.1", xff("203.0.113.9, ::ffff:10.0.0.2")) == "203.0.113.9"


def test_no_trusted_peer_without_forwarding_headers_is_replaced() -> None:
    assert client("127.0.0.1") == "127.0.0.1"
    assert client("127.0.0.1", (b"x-real-ip", b"203.0.113.9")) == "127.0.0.1"


def test_what_the_peers_verdicts_keep_is_bounded() -> None:
    proxies = Proxies(networks("10.0.0.0/8"))
    for i in range(5000):
        assert proxies.trusts(f"10.0.{i // 256}.{i % 256}")
    assert not proxies.trusts("192.0.2.1")
    assert len(proxies._peers) <= 1024


def test_forwarded_elements_are_read_in_order() -> None:
    value = b'for=192.0.2.43, for="[2001:db8::17]", by=1.2.3.4, For=x;proto=http'
    assert forwarded_for(value) == ["192.0.2.43", "[2001:db8::17]", "", "x"]


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("192.0.2.1:80", "192.0.2.1"),
        ("192.0.2.1:_p", "192.0.2.1"),  # an obfuscated port (RFC 7239 section 6.3)
        ("192.0.2.1:", None),
        ("192.0.2.1:\u00b2", None),  # a digit, but not an ASCII one
        ("[::1]", "::1"),
        ("[::1]:8080", "::1"),
        ("[::1]8080", None),
        ("[::1", None),
        ("::1", "::1"),
        ("_hidden", None),
        ("localhost", None),
    ],
)
def test_a_node_as_proxies_write_it(node: str, expected: str | None) -> None:
    found = parse_node(node)
    assert (None if found is None else str(found)) == expected


def test_the_setting_takes_addresses_and_networks() -> None:
    settings = Settings(trusted_proxies=" 127.0.0.1 , 10.0.0.0/8,fd00::/8,")
    assert settings.trusted_proxy_networks == (
        ipaddress.ip_network("127.0.0.1/32"),
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert Settings().trusted_proxy_networks == ()


@pytest.mark.parametrize("bad", ["proxy.local", "10.0.0.1/8", "10.0.0.0/33", "1.2.3.4;5.6.7.8"])
def test_the_setting_refuses_what_is_not_an_address_or_network(bad: str) -> None:
    """At start: a network with host bits set is a typo that would trust more than meant."""
    with pytest.raises(pydantic.ValidationError, match="trusted_proxies"):
        Settings(trusted_proxies=bad)
