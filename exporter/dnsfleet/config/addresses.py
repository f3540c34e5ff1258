"""Resolver addresses as the config writes them: IP literal, optional port, IPv6 zone."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from dnsfleet.config.checks import JSON, Check
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

DEFAULT_DNS_PORT = 53


def parse_address(text: str, *, default_port: int = DEFAULT_DNS_PORT) -> tuple[str, int, int]:  # noqa: C901 (one address grammar, read in one pass)
    """``127.0.0.1``, ``127.0.0.1:5353``, ``::1``, ``[::1]:5353``, ``[fe80::1%eth0]:53`` ->
    (ip, port, scope_id). Raises ValueError with a reason. Names are not resolved: a monitor
    that depends on DNS to find its DNS servers fails exactly when it is needed."""
    text = text.strip()
    host, port_s = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"unbalanced [ in {quote(text)}")
        host, rest = text[1:end], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"unexpected {quote(rest)} after ]")
            port_s = rest[1:]
    elif text.count(":") == 1:
        host, port_s = text.split(":")
    scope = ""
    if "%" in host:
        host, scope = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{quote(host)} is not an IP address (names are not resolved)") from None
    port = default_port
    if port_s:
        if not (port_s.isascii() and port_s.isdigit()) or not 0 < int(port_s) < 65536:
            raise ValueError(f"invalid port {quote(port_s)}")
        port = int(port_s)
    scope_id = 0
    if scope:
        if ip.version != 6:
            raise ValueError("a %zone is only valid on IPv6 addresses")
        scope_id = int(scope) if scope.isascii() and scope.isdigit() else _if_index(scope)
        if not 0 < scope_id < 2**32:
            raise ValueError(f"zone id {quote(scope)} out of range")
    return str(ip), port, scope_id


def _if_index(name: str) -> int:
    try:
        return socket.if_nametoindex(name)
    except OSError:
        raise ValueError(f"unknown interface {quote(name)}") from None


@dataclass(frozen=True)
class Endpoint:
    """A resolver or agent address: literal IP, port, IPv6 zone (interface index, 0 for
    none). Targets, Consul agents and capacity measurements all key on it."""

    host: str
    port: int
    scope_id: int = 0

    @classmethod
    def parse(cls, text: str, *, default_port: int = DEFAULT_DNS_PORT) -> Endpoint:
        """See :func:`parse_address`; ValueError with a reason."""
        host, port, scope_id = parse_address(text, default_port=default_port)
        return cls(host, port, scope_id)

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    @property
    def sockaddr(self) -> tuple[str, int] | tuple[str, int, int, int]:
        if self.family == socket.AF_INET6:
            return (self.host, self.port, 0, self.scope_id)
        return (self.host, self.port)

    def key(self) -> str:
        """One spelling per address whatever the config wrote: ``host:port``, ``[v6]:port``
        (the zone left out, as capacity.address_key does)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        """As the config would write it, zone included, so it reads back the same."""
        if self.scope_id:
            return f"[{self.host}%{self.scope_id}]:{self.port}"
        return self.key()


class Address(Check):
    """An IP literal with optional port and IPv6 zone; names are not resolved."""

    def __init__(self, *, default_port: int = DEFAULT_DNS_PORT) -> None:
        self.default_port = default_port

    def read(self, node: Node) -> Endpoint:
        try:
            return Endpoint.parse(node.string(), default_port=self.default_port)
        except ValueError as e:
            raise node.error(str(e)) from None

    def schema(self) -> JSON:
        return {
            "type": "string",
            "minLength": 1,
            "description": "IP address, optional :port (IPv6: [address]:port), optional "
            f"%zone on IPv6; port {self.default_port} when left out",
        }

    def dump(self, value: object) -> str:
        return str(value)
