"""Checks of the domain's concepts, one per concept (see :mod:`~dnsfleet.config.checks` for
what a check does): DNS names, labels, query types and classes, rcodes, regular expressions,
Prometheus label sets, networks, HTTP addresses and URLs, absolute paths."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

import dns.rcode
import dns.rdataclass
import dns.rdatatype

from dnsfleet.config.checks import JSON, Check
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote
from dnsfleet.dnswire import encode_name


class DnsName(Check):
    """A domain name in presentation form, as the probe will encode it."""

    def read(self, node: Node) -> str:
        s = node.string()
        try:
            encode_name(s)
        except ValueError as e:
            raise node.error(f"invalid name {quote(s)}: {e}") from None
        return s

    def schema(self) -> JSON:
        return {"type": "string", "minLength": 1}


class QueryType(Check):
    """An RR type mnemonic (``AAAA``) or ``TYPEnnn`` (RFC 3597), any case; kept upper-case."""

    def read(self, node: Node) -> str:
        qtype = node.string().upper()
        try:
            dns.rdatatype.from_text(qtype)
        except (dns.rdatatype.UnknownRdatatype, ValueError):
            raise node.error(f"unknown query type {quote(qtype)}") from None
        return qtype

    def schema(self) -> JSON:
        return {"type": "string", "pattern": r"^[A-Za-z][A-Za-z0-9-]*$"}


class QueryClass(Check):
    def read(self, node: Node) -> str:
        qclass = node.string().upper()
        try:
            dns.rdataclass.from_text(qclass)
        except (dns.rdataclass.UnknownRdataclass, ValueError):
            raise node.error(f"unknown query class {quote(qclass)}") from None
        return qclass

    def schema(self) -> JSON:
        return {"type": "string", "pattern": r"^[A-Za-z][A-Za-z0-9]*$"}


class Rcodes(Check):
    """A non-empty list of rcode mnemonics (``NOERROR``, ``NXDOMAIN``), any case."""

    def read(self, node: Node) -> tuple[str, ...]:
        out = []
        for item in node.sequence():
            r = item.string().upper()
            try:
                dns.rcode.from_text(r)
            except (dns.rcode.UnknownRcode, ValueError):  # out of range: ValueError
                raise item.error(f"unknown rcode {quote(r)}") from None
            out.append(r)
        if not out:
            raise node.error("must list at least one rcode")
        return tuple(out)

    def schema(self) -> JSON:
        return {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "pattern": r"^[A-Za-z0-9]+$"},
        }

    def dump(self, value: Any) -> Any:
        return list(value)


class Regex(Check):
    """A Python regular expression (matched with ``re``); empty allowed."""

    def read(self, node: Node) -> str:
        text = node.string(allow_empty=True)
        try:
            re.compile(text)
        except re.error as e:
            raise node.error(f"invalid regular expression: {e}") from None
        return text

    def schema(self) -> JSON:
        return {"type": "string", "format": "regex"}


class RE2List(Check):
    """Regular expressions matched with RE2 (probes/result.py): its syntax, Go's, is what
    is accepted."""

    def read(self, node: Node) -> tuple[str, ...]:
        items = node.sequence()
        if not items:
            return ()
        # google-re2 is an optional dependency (the `re2` extra): Debian has no package of
        # it, so the Debian package runs without it and refuses regexes here, at load.
        try:
            import re2  # noqa: PLC0415 - only configs with answer checks load it
        except ImportError:
            raise node.error(
                "regular expressions need the google-re2 Python module, which is not "
                "installed (pip install google-re2; see docs/deployment.md)"
            ) from None

        quiet = re2.Options()
        quiet.log_errors = False  # the error goes into our message, not to stderr
        out = []
        for item in items:
            try:
                re2.compile(item.string(), options=quiet)
            except re2.error as e:
                problem = e.args[0].decode() if isinstance(e.args[0], bytes) else str(e)
                raise item.error(f"invalid regular expression (RE2 syntax): {problem}") from None
            out.append(item.string())
        return tuple(out)

    def schema(self) -> JSON:
        return {"type": "array", "items": {"type": "string", "minLength": 1}}

    def dump(self, value: Any) -> Any:
        return list(value)


# A DNS label: Consul's DNS interface can only look up names and tags made of these.
DNS_LABEL_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$"
_DNS_LABEL_RE = re.compile(DNS_LABEL_PATTERN)


@dataclasses.dataclass(frozen=True)
class DnsLabel(Check):
    what: str

    def read(self, node: Node) -> str:
        s = node.string()
        if not _DNS_LABEL_RE.match(s):
            raise node.error(
                f"{quote(s)} is not usable as a DNS label in {self.what} "
                "(letters, digits, - and _; at most 63)"
            )
        return s

    def schema(self) -> JSON:
        return {"type": "string", "pattern": DNS_LABEL_PATTERN}


class AbsolutePath(Check):
    def read(self, node: Node) -> str:
        path = node.string()
        if not path.startswith("/"):
            raise node.error(f"path must be absolute, got {quote(path)}")
        return path

    def schema(self) -> JSON:
        return {"type": "string", "pattern": "^/"}


# --------------------------------------------------------------------------- labels


LABEL_NAME_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
LABEL_NAME_RE = re.compile(LABEL_NAME_PATTERN)


@dataclasses.dataclass(frozen=True)
class Labels(Check):
    """Extra labels: Prometheus label names (the ``__`` prefix is Prometheus's own), none of
    ``reserved``; values are strings, sorted by name."""

    reserved: frozenset[str]

    def read(self, node: Node) -> tuple[tuple[str, str], ...]:
        out: list[tuple[str, str]] = []
        for k, v in node.items():
            if not isinstance(k, str) or not LABEL_NAME_RE.fullmatch(k) or k.startswith("__"):
                raise v.error("invalid label name", at_key=True)
            if k in self.reserved:
                raise v.error(
                    f"label {quote(k)} is set by the exporter and cannot be configured", at_key=True
                )
            out.append((k, v.string(allow_empty=True)))
        return tuple(sorted(out))

    def schema(self) -> JSON:
        return {
            "type": "object",
            "propertyNames": {
                "pattern": LABEL_NAME_PATTERN.replace("^", "^(?!__)", 1),
                "not": {"enum": sorted(self.reserved)},
            },
            "additionalProperties": {"type": ["string", "number"]},
        }

    def dump(self, value: Any) -> Any:
        return dict(value)


# --------------------------------------------------------------------------- networks


class Cidrs(Check):
    """Networks, each normalised once: an IPv4-mapped IPv6 network (``::ffff:10.0.0.0/104``)
    is the IPv4 network it maps (``10.0.0.0/8``), as /probe judges a ``::ffff:a.b.c.d``
    target by the IPv4 host it reaches; left mapped, the entry matched nothing."""

    def read(self, node: Node) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        out = []
        for item in node.sequence():
            try:
                net = ipaddress.ip_network(item.string(), strict=False)
            except ValueError as e:
                raise item.error(f"invalid CIDR: {e}") from None
            mapped = net.network_address.ipv4_mapped if net.version == 6 else None
            if mapped is not None and net.prefixlen >= 96:
                net = ipaddress.ip_network(f"{mapped}/{net.prefixlen - 96}")
            out.append(net)
        return tuple(out)

    def schema(self) -> JSON:
        return {"type": "array", "items": {"type": "string", "minLength": 1}}

    def dump(self, value: Any) -> Any:
        return [str(n) for n in value]


_HTTP_URL_RE = re.compile(r"^(https?)://(\[[0-9A-Fa-f:.]+\]|[^/:\[\]]+)(?::(\d+))?/?$")


class HttpAddress(Check):
    """``http://host[:port]`` or ``https://...``: scheme, host and port, no path."""

    def read(self, node: Node) -> str:
        s = node.string().strip()
        m = _HTTP_URL_RE.match(s)
        if not m:
            raise node.error(
                f"{quote(s)} is not an http:// or https:// address with host "
                "and optional port, and no path"
            )
        if m.group(3) and not 0 < int(m.group(3)) < 65536:
            raise node.error(f"invalid port {quote(m.group(3))}")
        return s.rstrip("/")

    def schema(self) -> JSON:
        return {"type": "string", "pattern": r"^https?://[^/]+/?$"}


class HttpUrl(Check):
    def read(self, node: Node) -> str:
        url = node.string()
        if not re.match(r"^https?://[^/]+", url):
            raise node.error(f"{quote(url)} is not an http:// or https:// URL")
        return url

    def schema(self) -> JSON:
        return {"type": "string", "pattern": r"^https?://[^/]+"}
