"""resolv.conf(5) as glibc reads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResolvConf:
    nameservers: tuple[str, ...] = ()


def parse_resolv_conf(text: str) -> ResolvConf:
    servers: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].split(";", 1)[0].split()
        if len(line) >= 2 and line[0] == "nameserver":
            servers.append(line[1])
    return ResolvConf(nameservers=tuple(servers))
