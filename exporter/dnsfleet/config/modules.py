"""``modules``: what a probe asks and what counts as a good answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import dns.rcode
import dns.rdataclass
import dns.rdatatype

from dnsfleet.config.reader import Fields, Node, _show
from dnsfleet.dnswire import encode_name

Transport = Literal["udp", "tcp"]
TRANSPORTS: tuple[Transport, ...] = ("udp", "tcp")


@dataclass(frozen=True)
class Module:
    """A probe definition: what to ask and what counts as a good answer."""

    name: str
    query_name: str = "."
    query_type: str = "NS"
    query_class: str = "IN"
    transport: Transport = "udp"
    timeout: float = 2.0
    valid_rcodes: tuple[str, ...] = ("NOERROR",)
    recursion_desired: bool = True
    edns: bool = True
    edns_udp_size: int = 1232
    # Fewer answer RRs than this is answer_mismatch.
    min_answers: int = 0
    # Regexes against each answer RR in presentation form ("name ttl IN TYPE rdata").
    fail_if_not_matches: tuple[str, ...] = ()
    fail_if_matches: tuple[str, ...] = ()
    # /probe may override query_name / query_type only when this is true.
    allow_query_override: bool = False
    # Restart and cache-flush detection (issue 4): a long-TTL name the resolver caches, whose
    # TTL is followed across scrapes, and how much slack TTL continuity gets.
    canary: str | None = None
    canary_type: str = "A"
    canary_tolerance: float = 2.0
    # Backend identity from CHAOS TXT (e.g. id.server.) instead of EDNS NSID.
    identity_query: str | None = None

    @property
    def qtype(self) -> int:
        return int(dns.rdatatype.from_text(self.query_type))

    @property
    def qclass(self) -> int:
        return int(dns.rdataclass.from_text(self.query_class))

    @property
    def valid_rcode_numbers(self) -> frozenset[int]:
        return frozenset(int(dns.rcode.from_text(r)) for r in self.valid_rcodes)


def _transport(n: Node) -> Transport:
    return "tcp" if n.choice(TRANSPORTS) == "tcp" else "udp"


def _parse_module(name: str, node: Node) -> Module:
    f = node.fields()
    qtype = f.opt("query_type", "NS", lambda n: n.string().upper())
    try:
        dns.rdatatype.from_text(qtype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise f.get("query_type").error(f"unknown query type {_show(qtype)}") from None
    qclass = f.opt("query_class", "IN", lambda n: n.string().upper())
    try:
        dns.rdataclass.from_text(qclass)
    except (dns.rdataclass.UnknownRdataclass, ValueError):
        raise f.get("query_class").error(f"unknown query class {_show(qclass)}") from None
    qname = f.opt("query_name", ".", lambda n: n.string())
    try:
        encode_name(qname)
    except ValueError as e:
        raise f.get("query_name").error(f"invalid name {_show(qname)}: {e}") from None

    def rcodes(n: Node) -> tuple[str, ...]:
        out = []
        for item in n.sequence():
            r = item.string().upper()
            try:
                dns.rcode.from_text(r)
            except (dns.rcode.UnknownRcode, ValueError):  # out of range: ValueError
                raise item.error(f"unknown rcode {_show(r)}") from None
            out.append(r)
        if not out:
            raise n.error("must list at least one rcode")
        return tuple(out)

    def regexes(n: Node) -> tuple[str, ...]:
        # Matched with RE2 (probes/result.py): its syntax, Go's, is what is accepted.
        import re2  # noqa: PLC0415 - only configs with answer checks load it

        quiet = re2.Options()
        quiet.log_errors = False        # the error goes into our message, not to stderr
        out = []
        for item in n.sequence():
            try:
                re2.compile(item.string(), options=quiet)
            except re2.error as e:
                problem = e.args[0].decode() if isinstance(e.args[0], bytes) else str(e)
                raise item.error(f"invalid regular expression (RE2 syntax): {problem}") from None
            out.append(item.string())
        return tuple(out)

    mod = Module(
        name=name,
        query_name=qname,
        query_type=qtype,
        query_class=qclass,
        transport=f.opt("transport", "udp", _transport),
        timeout=f.opt("timeout", 2.0, lambda n: n.duration(maximum=60)),
        valid_rcodes=f.opt("valid_rcodes", ("NOERROR",), rcodes),
        recursion_desired=f.opt("recursion_desired", True, Node.boolean),
        edns=f.opt("edns", True, Node.boolean),
        edns_udp_size=f.opt("edns_udp_size", 1232, lambda n: n.integer(minimum=512, maximum=65535)),
        min_answers=f.opt("min_answers", 0, lambda n: n.integer(minimum=0)),
        fail_if_not_matches=f.opt("fail_if_not_matches", (), regexes),
        fail_if_matches=f.opt("fail_if_matches", (), regexes),
        allow_query_override=f.opt("allow_query_override", False, Node.boolean),
        **_parse_canary(f),
    )
    f.done()
    return mod


def _dns_name(n: Node) -> str:
    s = n.string()
    try:
        encode_name(s)
    except ValueError as e:
        raise n.error(f"invalid name {_show(s)}: {e}") from None
    return s


def _parse_canary(f: Fields) -> dict[str, Any]:
    canary = f.opt("canary", None, _dns_name)
    ctype = f.opt("canary_type", "A", lambda n: n.string().upper())
    try:
        dns.rdatatype.from_text(ctype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise f.get("canary_type").error(f"unknown query type {_show(ctype)}") from None
    tolerance = f.opt("canary_tolerance", 2.0, lambda n: n.duration(maximum=300))
    if canary is None:
        for key in ("canary_type", "canary_tolerance"):
            if f.has(key):
                raise f.get(key).error("only meaningful with canary")
    return {"canary": canary, "canary_type": ctype, "canary_tolerance": tolerance,
            "identity_query": f.opt("identity_query", None, _dns_name)}


DEFAULT_MODULE = Module(name="recursive")
