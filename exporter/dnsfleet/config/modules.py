"""``modules``: what a probe asks and what counts as a good answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import dns.rcode
import dns.rdataclass
import dns.rdatatype

from dnsfleet.config.checks import Boolean, Choice, Duration, Integer, check_needs, key, read_keys
from dnsfleet.config.concepts import DnsName, QueryClass, QueryType, Rcodes, RE2List
from dnsfleet.config.reader import Node
from dnsfleet.config.transport import CaFile, DohUrl, DohUrlCheck

# tls: DNS over TLS (RFC 7858), https: DNS over HTTPS (RFC 8484).
Transport = Literal["udp", "tcp", "tls", "https"]
TRANSPORTS: tuple[Transport, ...] = ("udp", "tcp", "tls", "https")
ENCRYPTED: frozenset[str] = frozenset({"tls", "https"})
HttpsMethod = Literal["GET", "POST"]
# DNSSEC from the resolver's side: see docs/configuration.md, `dnssec`.
Dnssec = Literal["none", "do", "require_ad", "expect_bogus"]
DNSSEC_MODES: tuple[Dnssec, ...] = ("none", "do", "require_ad", "expect_bogus")


@dataclass(frozen=True)
class Module:
    """A probe definition: what to ask and what counts as a good answer."""

    name: str  # the key under `modules`
    query_name: str = field(default=".", metadata=key(DnsName()))
    query_type: str = field(default="NS", metadata=key(QueryType()))
    query_class: str = field(default="IN", metadata=key(QueryClass()))
    transport: Transport = field(default="udp", metadata=key(Choice(TRANSPORTS)))
    timeout: float = field(default=2.0, metadata=key(Duration(maximum=60)))
    valid_rcodes: tuple[str, ...] = field(
        default=("NOERROR",),
        metadata=key(Rcodes(), doc="Answers with another rcode fail with reason rcode."),
    )
    recursion_desired: bool = field(default=True, metadata=key(Boolean()))
    edns: bool = field(default=True, metadata=key(Boolean()))
    edns_udp_size: int = field(default=1232, metadata=key(Integer(minimum=512, maximum=65535)))
    # DoT and DoH: see docs/configuration.md, "Encrypted transports".
    tls_server_name: str | None = field(
        default=None,
        metadata=key(
            DnsName(),
            doc="tls/https: the name the server's certificate must carry, sent as SNI; "
            "default: the doh_url's host, else the target's IP address (IP SAN)",
        ),
    )
    tls_ca_file: str | None = field(
        default=None,
        metadata=key(
            CaFile(),
            doc="tls/https: PEM file of the CAs to trust instead of the system's; checked at load",
        ),
    )
    doh_url: DohUrl | None = field(
        default=None,
        metadata=key(
            DohUrlCheck(),
            doc="https: the DoH URL (https://host[:port]/path); the host is the :authority "
            "and default server name, never resolved: the connection goes to the target's "
            "address. Default path /dns-query",
        ),
    )
    https_method: HttpsMethod = field(
        default="POST",
        metadata=key(Choice(("GET", "POST")), omit="POST", doc="https: RFC 8484 GET or POST"),
    )
    dnssec: Dnssec = field(
        default="none",
        metadata=key(
            Choice(DNSSEC_MODES),
            doc="do: set DO and AD and export whether the answer was validated; "
            "require_ad: the same, and an answer without AD fails (not_validated); "
            "expect_bogus: query_name is deliberately broken, SERVFAIL is success and "
            "an answer fails (validation_disabled).",
        ),
    )
    min_answers: int = field(
        default=0,
        metadata=key(Integer(minimum=0), doc="Fewer answer RRs than this is answer_mismatch."),
    )
    fail_if_not_matches: tuple[str, ...] = field(
        default=(),
        metadata=key(
            RE2List(),
            doc="RE2 regexes, each of which some answer RR in presentation form "
            "(name ttl IN TYPE rdata) must match.",
        ),
    )
    fail_if_matches: tuple[str, ...] = field(
        default=(),
        metadata=key(RE2List(), doc="RE2 regexes no answer RR in presentation form may match."),
    )
    allow_query_override: bool = field(
        default=False,
        metadata=key(
            Boolean(), doc="/probe may override query_name and query_type only when true."
        ),
    )
    # Restart and cache-flush detection: the canary's TTL followed across scrapes.
    canary: str | None = field(
        default=None,
        metadata=key(
            DnsName(),
            doc="A long-TTL name the resolver caches, whose TTL is followed across "
            "scrapes to detect restarts and cache flushes.",
        ),
    )
    canary_type: str = field(default="A", metadata=key(QueryType(), needs="canary"))
    canary_tolerance: float = field(
        default=2.0,
        metadata=key(
            Duration(maximum=300), needs="canary", doc="How much slack canary TTL continuity gets."
        ),
    )
    identity_query: str | None = field(
        default=None,
        metadata=key(
            DnsName(),
            doc="Backend identity from this CHAOS TXT name (e.g. id.server.) instead of EDNS NSID.",
        ),
    )

    # Cached: judging every probe's answer asks for them.
    @cached_property
    def qtype(self) -> int:
        return int(dns.rdatatype.from_text(self.query_type))

    @cached_property
    def qclass(self) -> int:
        return int(dns.rdataclass.from_text(self.query_class))

    @cached_property
    def server_name(self) -> str | None:
        """The name the certificate must carry (and SNI), or None: verify the IP address."""
        if self.tls_server_name:
            return self.tls_server_name.rstrip(".")
        return self.doh_url.host if self.doh_url is not None else None

    @cached_property
    def valid_rcode_numbers(self) -> frozenset[int]:
        return frozenset(int(dns.rcode.from_text(r)) for r in self.valid_rcodes)


def parse_module(name: str, node: Node) -> Module:
    f = node.fields()
    mod = Module(name=name, **read_keys(f, Module))
    check_needs(f, mod)
    if mod.transport not in ENCRYPTED:
        for k in ("tls_server_name", "tls_ca_file", "doh_url", "https_method"):
            if f.has(k):
                raise node.child(k).error(f"only meaningful with transport tls or https, not "
                                          f"{mod.transport}")  # fmt: skip
    elif mod.transport == "tls" and (f.has("doh_url") or f.has("https_method")):
        k = "doh_url" if f.has("doh_url") else "https_method"
        raise node.child(k).error("only meaningful with transport https")
    if mod.transport in ENCRYPTED and (mod.canary or mod.identity_query):
        k = "canary" if mod.canary else "identity_query"
        raise node.child(k).error(f"not supported over transport {mod.transport} yet")
    if mod.dnssec != "none" and not mod.edns:
        raise node.child("dnssec").error(f"dnssec {mod.dnssec} needs edns (DO is an EDNS flag)")
    if mod.dnssec == "expect_bogus" and f.has("valid_rcodes"):
        raise node.child("valid_rcodes").error(
            "dnssec expect_bogus expects SERVFAIL: valid_rcodes does not apply"
        )
    f.done()
    return mod


DEFAULT_MODULE = Module(name="recursive")
