"""Which URLs a webhook may reach: http(s) to public addresses, unless WEBHOOK_ALLOW names them.

So a caller cannot make the service knock on its own network. The address connected to is the
one checked, and is checked again once connected. A changing DNS answer cannot slip through."""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

URL_MAX = 2048
NOT_PUBLIC = "resolves to an address that is not public (loopback, private, link-local, reserved)"


class UrlRefused(Exception):
    """`rule` says which rule refused, in a person's words."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


@dataclass(frozen=True)
class Allowance:
    """WEBHOOK_ALLOW: names, addresses and networks reachable though not public."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: list[str]) -> "Allowance":
        hosts, networks = set(), []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def admits(self, host: str, address: IPAddress) -> bool:
        if host.lower().rstrip(".") in self.hosts:
            return True
        return any(address in network for network in self.networks)


@dataclass(frozen=True)
class Target:
    """A webhook URL split for the connection."""

    url: str
    scheme: str
    host: str
    port: int
    path: str


def parse_url(url: str) -> Target:
    """The URL's parts, or UrlRefused naming the rule it breaks."""
    if len(url) > URL_MAX:
        raise UrlRefused(f"at most {URL_MAX} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UrlRefused("must be an absolute http or https URL") from None
    if parts.scheme not in ("http", "https"):
        raise UrlRefused("must be an http or https URL")
    if not parts.hostname:
        raise UrlRefused("must name a host")
    if parts.username or parts.password:
        raise UrlRefused("must not carry a user name or password")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = 443 if parts.scheme == "https" else 80
    return Target(url, parts.scheme, parts.hostname, port or default, path)


def is_public(address: IPAddress) -> bool:
    """Global unicast only. An IPv4 address written as IPv6 is judged as IPv4."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def admitted(host: str, address: IPAddress, allow: Allowance) -> bool:
    return is_public(address) or allow.admits(host, address)


def resolve(target: Target, allow: Allowance) -> IPAddress:
    """The first resolved address the rules admit, or UrlRefused."""
    try:
        found = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UrlRefused(f"its host {target.host!r} does not resolve") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
    for address in addresses:
        if admitted(target.host, address, allow):
            return address
    raise UrlRefused(f"{NOT_PUBLIC}; WEBHOOK_ALLOW may name it")


def check_url(url: str, allow: Allowance) -> Target:
    """Checked when the job is submitted."""
    target = parse_url(url)
    resolve(target, allow)
    return target
