"""Where Herald may send a request to a URL it was handed (a webhook endpoint, a browser's Web Push
endpoint): https to public addresses only (SSRF).

A URL is checked when an endpoint is created or changed, and again before every send, because a
name that resolved to a public address yesterday may resolve to 169.254.169.254 today. Every
address the name resolves to must be allowed, and the request then goes to the address that was
checked (the host name rides in the Host header and in TLS SNI, so the certificate is still
verified against it): a second resolution between the check and the connection, the DNS
rebinding trick, has nothing to change.

Refused unless HERALD_WEBHOOK_ALLOWED_HOSTS names the host or a network holding the address:
anything that is not a global unicast address — private (10/8, 172.16/12, 192.168/16, fc00::/7),
loopback, link-local (169.254/16 with the cloud metadata service, fe80::/10), shared (100.64/10),
multicast, reserved, unspecified — IPv4 inside IPv6 judged as the IPv4 it carries. Loopback,
over http too, is allowed only when HERALD_WEBHOOK_ALLOW_LOOPBACK is set (`herald dev` sets it).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from herald.config import Settings
from herald.errors import ValidationFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_LENGTH = 2000
# A name that does not resolve within this long is refused as unresolvable (a request never
# hangs on a slow resolver; a send is bounded by its own timeout as well).
RESOLVE_TIMEOUT_SECONDS = 5.0


class WebhookUrlInvalid(ValidationFailed):
    """The webhook URL must be an absolute https URL without credentials."""

    code = "WEBHOOK_URL_INVALID"


class WebhookUrlUnresolvable(ValidationFailed):
    """The webhook URL's host name does not resolve."""

    code = "WEBHOOK_URL_UNRESOLVABLE"


class WebhookUrlForbidden(ValidationFailed):
    """The webhook URL resolves to a private, loopback, link-local or metadata address."""

    code = "WEBHOOK_URL_FORBIDDEN"


@dataclass(frozen=True)
class Target:
    """A checked destination: connect to `address`, name `host` in Host and SNI."""

    scheme: str
    host: str
    port: int
    address: str
    path: str

    def request_url(self) -> str:
        """The URL with the checked address in place of the name."""
        literal = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{literal}:{self.port}{self.path}"

    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


@dataclass(frozen=True)
class Allowed:
    hosts: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    loopback: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> Allowed:
        hosts: set[str] = set()
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in (e.strip() for e in settings.webhook_allowed_hosts.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks), settings.webhook_allow_loopback)

    def permits(self, host: str, address: IPAddress) -> bool:
        if host in self.hosts or any(address in network for network in self.networks):
            return True
        if address.is_loopback:
            return self.loopback
        return address.is_global and not address.is_multicast


def _judged(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class Parsed:
    scheme: str
    host: str
    port: int
    path: str


def parse(url: str) -> Parsed:
    """The URL's parts, or WebhookUrlInvalid. Scheme, host and credentials only; the addresses are
    judged by `resolve`."""
    if len(url) > MAX_URL_LENGTH:
        raise WebhookUrlInvalid(f"the URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise WebhookUrlInvalid() from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise WebhookUrlInvalid()
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlInvalid("the URL must not carry credentials")
    if parts.fragment:
        raise WebhookUrlInvalid("the URL must not carry a fragment")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Parsed(
        scheme=parts.scheme,
        host=parts.hostname.lower().rstrip("."),
        port=port or (443 if parts.scheme == "https" else 80),
        path=path,
    )


async def _addresses(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, TimeoutError):
        raise WebhookUrlUnresolvable() from None
    found: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    if not found:
        raise WebhookUrlUnresolvable()
    return found


async def resolve(url: str, settings: Settings) -> Target:
    """Check `url` as it resolves now: every address allowed, or a refusal saying why."""
    parsed = parse(url)
    allowed = Allowed.from_settings(settings)
    addresses = [_judged(a) for a in await _addresses(parsed.host, parsed.port)]
    for address in addresses:
        if not allowed.permits(parsed.host, address):
            raise WebhookUrlForbidden()
    if parsed.scheme == "http" and not (allowed.loopback and all(a.is_loopback for a in addresses)):
        raise WebhookUrlInvalid("the URL must use https")
    return Target(
        scheme=parsed.scheme,
        host=parsed.host,
        port=parsed.port,
        address=str(addresses[0]),
        path=parsed.path,
    )


async def host_refusal(host: str, port: int, settings: Settings) -> str | None:
    """Why a host a tenant names for a connection of its own (an SMTP relay) is refused —
    "unresolvable" or "forbidden" — by the same address rules as a webhook URL; None when every
    address it resolves to is allowed."""
    allowed = Allowed.from_settings(settings)
    try:
        addresses = [_judged(a) for a in await _addresses(host, port)]
    except WebhookUrlUnresolvable:
        return "unresolvable"
    if not all(allowed.permits(host, address) for address in addresses):
        return "forbidden"
    return None
