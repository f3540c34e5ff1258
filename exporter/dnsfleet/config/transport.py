"""Module keys for the encrypted transports, DoT and DoH: the DoH URL and the CA
file, each checked when the file is loaded."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from dnsfleet.config.checks import JSON, Check
from dnsfleet.config.files import read_regular_file
from dnsfleet.config.reader import ConfigError, Node
from dnsfleet.config.values import quote

PEM_CERT = "-----BEGIN CERTIFICATE-----"
DEFAULT_DOH_PATH = "/dns-query"


@dataclass(frozen=True, slots=True)
class DohUrl:
    authority: str  # host[:port] as written: the :authority header, never resolved
    host: str  # the default TLS server name
    path: str  # path and query, "/dns-query" at the least

    def __str__(self) -> str:
        return f"https://{self.authority}{self.path}"


def parse_doh_url(text: str) -> DohUrl:
    """``https://dns.example.com/dns-query`` -> DohUrl; ValueError with a reason."""
    parts = urlsplit(text)
    if parts.scheme != "https":
        raise ValueError(f"{quote(text)} is not an https:// URL (DoH runs over TLS only)")
    if not parts.hostname or parts.username or parts.password or parts.fragment:
        raise ValueError(f"{quote(text)}: need https://host[:port]/path, no user or fragment")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ValueError(f"{quote(text)}: invalid port") from None
    if "{?dns}" in text:
        raise ValueError(f"{quote(text)}: give the path without the URI template")
    path = (parts.path or DEFAULT_DOH_PATH) + (f"?{parts.query}" if parts.query else "")
    if not re.fullmatch(r"[!-~]+", path):
        raise ValueError(f"{quote(text)}: the path must be printable ASCII without spaces")
    return DohUrl(authority=parts.netloc, host=parts.hostname, path=path)


class DohUrlCheck(Check):
    def read(self, node: Node) -> DohUrl:
        try:
            return parse_doh_url(node.string())
        except ValueError as e:
            raise node.error(str(e)) from None

    def schema(self) -> JSON:
        return {"type": "string", "pattern": "^https://[^/]+"}

    def dump(self, value: object) -> str:
        return str(value)


def read_ca_file(path: str) -> str:
    """The PEM text of a CA bundle, checked by OpenSSL; ConfigError naming the file."""
    raw = read_regular_file(path)
    text = raw.decode("ascii", errors="replace")
    if PEM_CERT not in text:
        raise ConfigError(f"{path}: not a PEM certificate file (no {PEM_CERT!r} line)")
    try:
        ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(f"{path}: not a usable PEM certificate file: {e}") from None
    return text


class CaFile(Check):
    """A PEM file of CA certificates, read and checked at load (refused: not PEM, a FIFO,
    larger than 16 MiB, unreadable)."""

    def read(self, node: Node) -> str:
        path = node.string()
        if not path.startswith("/"):
            raise node.error(f"path must be absolute, got {quote(path)}")
        try:
            read_ca_file(path)
        except ConfigError as e:
            raise node.error(str(e)) from None
        return path

    def schema(self) -> JSON:
        return {"type": "string", "pattern": "^/"}
