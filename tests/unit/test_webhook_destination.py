"""Which addresses a webhook may reach (SSRF), and how a checked target is addressed."""

from __future__ import annotations

import ipaddress

import pytest

from herald.channels import destination
from herald.channels.destination import Allowed, Target
from herald.config import Settings


def allowed(**update: object) -> Allowed:
    return Allowed.from_settings(Settings().model_copy(update=update))


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.0.1",
        "127.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::",
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert not allowed().permits("h", ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_pass(address: str) -> None:
    assert allowed().permits("h", ipaddress.ip_address(address))


def test_loopback_only_when_allowed_and_the_allow_list_opens_exceptions() -> None:
    loop = ipaddress.ip_address("127.0.0.1")
    assert allowed(webhook_allow_loopback=True).permits("h", loop)
    assert not allowed(webhook_allow_loopback=True).permits("h", ipaddress.ip_address("10.0.0.1"))
    listed = allowed(webhook_allowed_hosts="10.9.0.0/16, Hooks.Internal.")
    assert listed.permits("h", ipaddress.ip_address("10.9.8.7"))
    assert not listed.permits("h", ipaddress.ip_address("10.10.0.1"))
    assert listed.permits("hooks.internal", ipaddress.ip_address("10.10.0.1"))


def test_parse_refuses_what_is_not_a_plain_web_url() -> None:
    for url in ("ftp://x.example/", "https://u:p@x.example/", "https:///nohost", "https://x/#f"):
        with pytest.raises(destination.WebhookUrlInvalid):
            destination.parse(url)
    with pytest.raises(destination.WebhookUrlInvalid):
        destination.parse("https://x.example/" + "a" * 2001)
    parsed = destination.parse("https://Hooks.Example.:8443/in?a=1")
    assert (parsed.host, parsed.port, parsed.path) == ("hooks.example", 8443, "/in?a=1")


def test_target_connects_to_the_checked_address_and_names_the_host() -> None:
    target = Target("https", "hooks.example", 443, "2001:db8::1", "/in")
    assert target.request_url() == "https://[2001:db8::1]:443/in"
    assert target.host_header() == "hooks.example"
    assert Target("http", "localhost", 8080, "127.0.0.1", "/").host_header() == "localhost:8080"
