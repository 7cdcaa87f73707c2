"""The one address classification both the URL check and the delivery transport use."""

from __future__ import annotations

import ipaddress

import pytest

from wayline.core.errors import RejectedInput
from wayline.registry.urls import AddressPolicy, check_endpoint_url, embedded_ipv4, non_public


@pytest.mark.parametrize(("address", "kind"), [
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("127.0.0.1", "loopback"),
    ("::1", "loopback"),
    ("169.254.169.254", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("10.1.2.3", "private"),
    ("fd00::1", "private"),
    ("240.0.0.1", "reserved"),
    ("::7f00:1", "reserved"),  # IPv4-compatible, deprecated
    ("fec0::1", "site-local"),
    ("100.64.0.1", "not globally routable"),  # carrier-grade NAT
    ("::ffff:127.0.0.1", "loopback: it embeds 127.0.0.1"),
    ("64:ff9b::7f00:1", "loopback: it embeds 127.0.0.1"),  # NAT64, which Python calls global
    ("2002:7f00:1::", "loopback: it embeds 127.0.0.1"),  # 6to4, which Python calls global
    ("64:ff9b::a9fe:a9fe", "link-local: it embeds 169.254.169.254"),
    ("2002:a01:203::1", "private: it embeds 10.1.2.3"),
    ("8.8.8.8", None),
    ("2606:4700:4700::1111", None),
    ("::ffff:8.8.8.8", None),
    ("64:ff9b::808:808", None),
    ("2002:808:808::", None),
])
def test_each_kind_of_non_public_address_is_named(address: str, kind: str | None) -> None:
    assert non_public(ipaddress.ip_address(address)) == kind


def test_only_mapped_nat64_and_6to4_addresses_embed_an_ipv4_address() -> None:
    assert embedded_ipv4(ipaddress.ip_address("64:ff9b::c000:201")) == ipaddress.ip_address("192.0.2.1")
    assert embedded_ipv4(ipaddress.ip_address("2001:db8::c000:201")) is None
    assert embedded_ipv4(ipaddress.ip_address("192.0.2.1")) is None


def test_the_allow_list_admits_names_and_ranges_of_their_own_ip_version_only() -> None:
    policy = AddressPolicy.of(["127.0.0.1/32", "Receiver.Internal", "fd00::/8"])
    loopback = ipaddress.ip_address("127.0.0.1")
    assert policy.refusal("a", loopback) is None
    assert policy.refusal("receiver.internal", ipaddress.ip_address("10.9.9.9")) is None
    assert policy.refusal("a", ipaddress.ip_address("fd00::5")) is None
    assert policy.refusal("a", ipaddress.ip_address("8.8.8.8")) is None
    # 0.0.0.1 is 1 as a number, like ::1 and like an address inside ::/96: never mixed.
    assert policy.refusal("0.0.0.1", ipaddress.ip_address("0.0.0.1")) == (
        "0.0.0.1 is not a public address (private); an operator must add it to registry.url_allow_list")
    assert AddressPolicy.of(["::/96"]).refusal("a", ipaddress.ip_address("0.0.0.1")) is not None
    refusal = policy.refusal("a", ipaddress.ip_address("64:ff9b::7f00:1"))
    assert refusal == ("a resolves to 64:ff9b::7f00:1, which is not a public address (loopback: it embeds "
                       "127.0.0.1); an operator must add it to registry.url_allow_list")


def test_an_empty_allow_list_refuses_what_a_host_name_resolves_to() -> None:
    with pytest.raises(RejectedInput, match=r"^url: rebind\.example resolves to 127\.0\.0\.1, .*\(loopback\)"):
        check_endpoint_url("https://rebind.example/x", [], resolver=lambda host: ["93.184.215.14", "127.0.0.1"])
    assert check_endpoint_url("https://public.example/x", [], resolver=lambda host: ["93.184.215.14"])


@pytest.mark.parametrize("url", [
    "https://example.com/a\r\nX-Injected: 1", "https://example.com/a\nb", "https://example.com/\tb",
    "https://example.com/\x00", "https://example.com/\x7f", "https://example.com/\x85",
])
def test_control_characters_are_refused_rather_than_silently_dropped(url: str) -> None:
    with pytest.raises(RejectedInput, match="control character"):
        check_endpoint_url(url, [], resolver=lambda host: ["93.184.215.14"])
