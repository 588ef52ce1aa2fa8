"""One try of a delivery: an HTTP POST to the checked address, nothing else.

http.client, because it must connect to the admitted address while naming the URL's host for
Host, SNI and the certificate. It never follows a redirect. It reads at most RESPONSE_CAP
bytes, never logged."""

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
    """An HTTP(S) connection to one address, naming the URL's host."""

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
    """Raises OSError, http.client's errors or UrlRefused."""
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
