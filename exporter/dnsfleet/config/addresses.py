"""Resolver addresses as the config writes them: IP literal, optional port, IPv6 zone."""

from __future__ import annotations

import ipaddress
import socket

from dnsfleet.config.reader import _show

DEFAULT_DNS_PORT = 53


def parse_address(text: str, *, default_port: int = DEFAULT_DNS_PORT) -> tuple[str, int, int]:
    """``127.0.0.1``, ``127.0.0.1:5353``, ``::1``, ``[::1]:5353``, ``[fe80::1%eth0]:53`` ->
    (ip, port, scope_id). Raises ValueError with a reason. Names are not resolved: a monitor
    that depends on DNS to find its DNS servers fails exactly when it is needed."""
    text = text.strip()
    host, port_s = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"unbalanced [ in {_show(text)}")
        host, rest = text[1:end], text[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"unexpected {_show(rest)} after ]")
            port_s = rest[1:]
    elif text.count(":") == 1:
        host, port_s = text.split(":")
    scope = ""
    if "%" in host:
        host, scope = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{_show(host)} is not an IP address (names are not resolved)") from None
    port = default_port
    if port_s:
        if not (port_s.isascii() and port_s.isdigit()) or not 0 < int(port_s) < 65536:
            raise ValueError(f"invalid port {_show(port_s)}")
        port = int(port_s)
    scope_id = 0
    if scope:
        if ip.version != 6:
            raise ValueError("a %zone is only valid on IPv6 addresses")
        scope_id = int(scope) if scope.isascii() and scope.isdigit() else _if_index(scope)
        if not 0 < scope_id < 2**32:
            raise ValueError(f"zone id {_show(scope)} out of range")
    return str(ip), port, scope_id


def _if_index(name: str) -> int:
    try:
        return socket.if_nametoindex(name)
    except OSError:
        raise ValueError(f"unknown interface {_show(name)}") from None

