"""``modules``: what a probe asks and what counts as a good answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import dns.rcode
import dns.rdataclass
import dns.rdatatype

from dnsfleet.config.checks import (
    Boolean,
    Choice,
    DnsName,
    Duration,
    Integer,
    QueryClass,
    QueryType,
    Rcodes,
    RE2List,
    check_needs,
    key,
    read_keys,
)
from dnsfleet.config.reader import Node

Transport = Literal["udp", "tcp"]
TRANSPORTS: tuple[Transport, ...] = ("udp", "tcp")
# DNSSEC from the resolver's side (issue 23): see docs/configuration.md, `dnssec`.
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
    # Restart and cache-flush detection (issue 4).
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
    def valid_rcode_numbers(self) -> frozenset[int]:
        return frozenset(int(dns.rcode.from_text(r)) for r in self.valid_rcodes)


def _parse_module(name: str, node: Node) -> Module:
    f = node.fields()
    mod = Module(name=name, **read_keys(f, Module))
    check_needs(f, mod)
    if mod.dnssec != "none" and not mod.edns:
        raise node.child("dnssec").error(f"dnssec {mod.dnssec} needs edns (DO is an EDNS flag)")
    if mod.dnssec == "expect_bogus" and f.has("valid_rcodes"):
        raise node.child("valid_rcodes").error(
            "dnssec expect_bogus expects SERVFAIL: valid_rcodes does not apply"
        )
    f.done()
    return mod


DEFAULT_MODULE = Module(name="recursive")
