"""The client of a request: the socket peer, X-Forwarded-For only from trusted proxies, IPv6 by /64."""

from __future__ import annotations

import pytest

from gateway.client_address import MAX_HOPS, ClientAddresses, parse_address
from gateway.policy import PolicyError
from tests.support.calls import compile_doc, policy_doc


def test_without_trusted_proxies_the_peer_is_the_client_whatever_the_header_says() -> None:
    clients = ClientAddresses()
    assert clients.client_of("203.0.113.7", "198.51.100.1") == "203.0.113.7"
    assert clients.client_of("203.0.113.7") == "203.0.113.7"


def test_an_untrusted_peer_cannot_choose_its_address() -> None:
    clients = ClientAddresses(["10.0.0.0/8"])
    assert clients.client_of("203.0.113.7", "10.1.1.1, 198.51.100.1") == "203.0.113.7"


def test_a_trusted_proxy_names_the_right_most_untrusted_hop() -> None:
    clients = ClientAddresses(["10.0.0.0/8", "192.168.0.1/32"])
    # the client wrote 1.1.1.1 itself; 198.51.100.1 is what the first trusted proxy saw
    assert clients.client_of("10.0.0.2", "1.1.1.1, 198.51.100.1, 192.168.0.1") == "198.51.100.1"
    assert clients.client_of("10.0.0.2", "198.51.100.1") == "198.51.100.1"


def test_a_chain_of_trusted_hops_only_names_its_left_most() -> None:
    clients = ClientAddresses(["10.0.0.0/8"])
    assert clients.client_of("10.0.0.2", "10.0.0.9, 10.0.0.8") == "10.0.0.9"


def test_a_trusted_proxy_without_the_header_or_with_garbage_is_the_client_itself() -> None:
    clients = ClientAddresses(["10.0.0.0/8"])
    assert clients.client_of("10.0.0.2", None) == "10.0.0.2"
    assert clients.client_of("10.0.0.2", "") == "10.0.0.2"
    assert clients.client_of("10.0.0.2", "not-an-ip") == "10.0.0.2"
    assert clients.client_of("10.0.0.2", "1.1.1.1, unknown, 10.0.0.3") == "10.0.0.3"


def test_only_the_last_hops_are_read() -> None:
    clients = ClientAddresses(["10.0.0.0/8"])
    hops = ", ".join(["198.51.100.1"] + ["10.0.0.1"] * (MAX_HOPS + 5))
    assert clients.client_of("10.0.0.2", hops) == "10.0.0.1"


def test_ipv6_clients_are_counted_by_their_64() -> None:
    clients = ClientAddresses(["::1/128"])
    assert clients.client_of("2001:db8:1:2::5") == "2001:db8:1:2::/64"
    assert clients.client_of("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert clients.client_of("::1", "[2001:db8:9::1]:443") == "2001:db8:9::/64"
    assert clients.client_of("::ffff:203.0.113.7") == "203.0.113.7"  # IPv4-mapped: the IPv4 address


def test_a_peer_that_is_no_address_is_counted_by_its_name() -> None:
    clients = ClientAddresses(["10.0.0.0/8"])
    assert clients.client_of("testclient", "198.51.100.1") == "testclient"
    assert clients.client_of(None) == "unknown"
    assert clients.client_of("x" * 500) == "x" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.2.3.4", "1.2.3.4"), (" 1.2.3.4:8080 ", "1.2.3.4"), ("[::1]:80", "::1"), ("::1", "::1"), ("x", None)],
)
def test_parse_address(text: str, expected: str | None) -> None:
    address = parse_address(text)
    assert (str(address) if address is not None else None) == expected


def test_the_policy_compiles_its_trusted_proxies_and_refuses_bad_ones() -> None:
    doc = policy_doc(limits={"unauthenticated": {"trusted_proxies": ["10.0.0.0/8", "::1"]}})
    assert compile_doc(doc).clients.client_of("10.0.0.1", "198.51.100.1") == "198.51.100.1"
    with pytest.raises(PolicyError, match=r"limits.unauthenticated.trusted_proxies\[1\]: expected a CIDR"):
        compile_doc(policy_doc(limits={"unauthenticated": {"trusted_proxies": ["10.0.0.0/8", "nope"]}}))
