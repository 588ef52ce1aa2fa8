"""One try of a delivery: an HTTP POST to the address that was checked, nothing else.

The standard library's http.client, because the connection must go to the address
imagegen.webhooks.addresses resolved and admitted (and the socket's peer is checked again),
while the request still names the URL's host (its Host header, TLS's server name and
certificate check). It never follows a redirect, and reads at most RESPONSE_CAP bytes of the
answer, which is never logged."""

import http.client
import socket
import ssl
from ipaddress import ip_address

from imagegen.webhooks.addresses import (
    NOT_PUBLIC,
    Allowance,
    IPAddress,
    Target,
    UrlRefused,
    admitted,
    parse_url,
    resolve,
)

TIMEOUT = 10.0
RESPONSE_CAP = 1024


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTP(S) connection to one address, for a URL whose host it still names."""

    def __init__(self, target: Target, address: IPAddress, allow: Allowance) -> None:
        super().__init__(target.host, target.port, timeout=TIMEOUT)
        self.target, self.address, self.allow = target, address, allow

    def connect(self) -> None:
        sock = socket.create_connection((str(self.address), self.target.port), TIMEOUT)
        peer = ip_address(sock.getpeername()[0].split("%")[0])
        if peer != self.address or not admitted(self.target.host, peer, self.allow):
            sock.close()
            raise UrlRefused(NOT_PUBLIC)
        if self.target.scheme == "https":
            context = ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=self.target.host)
        self.sock = sock


def post(url: str, *, body: bytes, headers: dict[str, str], allow: Allowance) -> int:
    """The answer's status; raises OSError, http.client's errors or UrlRefused."""
    target = parse_url(url)
    connection = _PinnedConnection(target, resolve(target, allow), allow)
    try:
        connection.request("POST", target.path, body=body, headers={
            **headers, "Content-Type": "application/json", "User-Agent": "imagegen-webhooks",
        })  # fmt: skip
        response = connection.getresponse()
        response.read(RESPONSE_CAP)
        return response.status
    finally:
        connection.close()
