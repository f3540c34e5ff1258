"""Zone integrity at the zone's own nameservers (issue 23): SOA serials compared with RFC 1982
serial arithmetic, the earliest RRSIG expiry of the SOA and DNSKEY sets, and whether a
DNSKEY matches the DS the parent publishes.

Every nameserver of every zone is asked concurrently, RD clear, DO set, EDNS 1232 (a DNSKEY
set with its signatures exceeds 512 octets), over UDP and again over TCP when truncated;
only an authoritative (AA) answer counts. The parent's servers are asked for the zone's DS.

The DS digest is computed with hashlib (RFC 4034 5.1.4: the digest of the owner name in
canonical wire form followed by the DNSKEY RDATA), not ``dns.dnssec.make_ds``: importing
``dns.dnssec`` pulls in ``cryptography`` when it is installed (+8 MiB RSS), and its default
policy refuses SHA-1 digests, which parents still publish. tests/test_zones.py checks the
two agree for digest types 1, 2 and 4.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.config import Endpoint, Zone
from dnsfleet.dnswire import Malformed, Query, build_query, decode_message
from dnsfleet.exposition import Family
from dnsfleet.probes import tcp, udp

log = logging.getLogger(__name__)

SOA, DNSKEY, DS, RRSIG = 6, 48, 43, 46
ZONE_KEY_FLAG = 0x0100  # DNSKEY flags bit 7 (RFC 4034 2.1.1)
DIGESTS = {1: hashlib.sha1, 2: hashlib.sha256, 4: hashlib.sha384}
HALF = 2**31
STATE_KEY = "zones"


# --------------------------------------------------------------------------- pure


def serial_lt(a: int, b: int) -> bool:
    """RFC 1982 3.2: ``a < b`` in 32-bit serial arithmetic. The pair at distance exactly
    2**31 is undefined: neither is less."""
    return a != b and ((a < b and b - a < HALF) or (a > b and a - b > HALF))


def newest_serial(serials: list[int]) -> int | None:
    """The serial no other is newer than, or None when serial arithmetic cannot order them
    (a pair at distance 2**31, or spread over more than half the serial space)."""
    for s in serials:
        if all(t == s or serial_lt(t, s) for t in serials):
            return s
    return None


def key_tag(rdata: bytes) -> int:
    """RFC 4034 Appendix B (algorithm 1 is obsolete and not handled)."""
    acc = 0
    for i, b in enumerate(rdata):
        acc += b if i & 1 else b << 8
    acc += (acc >> 16) & 0xFFFF
    return acc & 0xFFFF


@dataclass(frozen=True, slots=True)
class DsRecord:
    key_tag: int
    algorithm: int
    digest_type: int
    digest: bytes


def ds_of(owner_wire: bytes, dnskey_rdata: bytes, digest_type: int) -> DsRecord | None:
    """The DS of a DNSKEY (RFC 4034 5.1.4), None for a digest type not known here."""
    h = DIGESTS.get(digest_type)
    if h is None:
        return None
    return DsRecord(
        key_tag(dnskey_rdata),
        dnskey_rdata[3],
        digest_type,
        h(owner_wire + dnskey_rdata).digest(),
    )


def ds_matches(owner_wire: bytes, ds_set: list[DsRecord], dnskeys: list[bytes]) -> bool:
    """A validator's rule: some DS of a digest type it knows matches some zone key."""
    for ds in ds_set:
        for key in dnskeys:
            flags = int.from_bytes(key[:2], "big")
            if flags & ZONE_KEY_FLAG and ds_of(owner_wire, key, ds.digest_type) == ds:
                return True
    return False


@dataclass(frozen=True, slots=True)
class SoaView:
    """What one nameserver says about the zone."""

    serial: int
    refresh: int
    soa_rrsig_expiry: int | None  # earliest, epoch seconds
    dnskeys: tuple[bytes, ...]  # DNSKEY RDATA in wire form
    dnskey_rrsig_expiry: int | None


def _rrsig_expiry(msg: Any, name: Any, covers: int) -> int | None:
    import dns.rdataclass  # noqa: PLC0415 - with dns.message, already loaded by decode
    import dns.rdatatype  # noqa: PLC0415

    rrset = msg.get_rrset(
        msg.answer,
        name,
        dns.rdataclass.IN,
        dns.rdatatype.RRSIG,
        covers=dns.rdatatype.RdataType(covers),
    )
    if rrset is None:
        return None
    return min(int(sig.expiration) for sig in rrset)


# --------------------------------------------------------------------------- network


class ZoneError(Exception):
    """A nameserver gave no usable answer; the message says why."""


async def _ask(
    ep: Endpoint, zone: str, qtype: int, timeout: float
) -> Any:  # dns.message.Message, imported lazily
    query: Query = build_query(
        zone, qtype, recursion_desired=False, dnssec_ok=True, nsid=False, payload=1232
    )
    ex = await udp.exchange(sockaddr=ep.sockaddr, family=ep.family, query=query, timeout=timeout)
    if ex.response is not None and ex.response.truncated:
        ex = await tcp.exchange(
            sockaddr=ep.sockaddr, family=ep.family, query=query, timeout=timeout
        )
    if ex.response is None:
        raise ZoneError(f"{ex.error.value if ex.error else 'error'}: {ex.detail}")
    try:
        msg = decode_message(ex.response.wire)
    except Malformed as e:
        raise ZoneError(str(e)) from None
    if msg.rcode() != 0:
        import dns.rcode  # noqa: PLC0415

        raise ZoneError(f"rcode {dns.rcode.to_text(msg.rcode())}")
    return msg


async def _view(ep: Endpoint, zone: Zone, timeout: float) -> SoaView:
    import dns.flags  # noqa: PLC0415
    import dns.name  # noqa: PLC0415
    import dns.rdataclass  # noqa: PLC0415
    import dns.rdatatype  # noqa: PLC0415

    name = dns.name.from_text(zone.apex)
    soa_msg, key_msg = await asyncio.gather(
        _ask(ep, zone.apex, SOA, timeout), _ask(ep, zone.apex, DNSKEY, timeout)
    )
    if not soa_msg.flags & dns.flags.AA:
        raise ZoneError("not authoritative for the zone (no AA)")
    soa = soa_msg.get_rrset(soa_msg.answer, name, dns.rdataclass.IN, dns.rdatatype.SOA)
    if soa is None or not len(soa):
        raise ZoneError("no SOA in the answer")
    rd = soa[0]
    keys = key_msg.get_rrset(key_msg.answer, name, dns.rdataclass.IN, dns.rdatatype.DNSKEY)
    return SoaView(
        serial=int(rd.serial),
        refresh=int(rd.refresh),
        soa_rrsig_expiry=_rrsig_expiry(soa_msg, name, SOA),
        dnskeys=tuple(k.to_digestable() for k in keys) if keys is not None else (),
        dnskey_rrsig_expiry=_rrsig_expiry(key_msg, name, DNSKEY),
    )


async def _ds_set(ep: Endpoint, zone: Zone, timeout: float) -> list[DsRecord]:
    import dns.name  # noqa: PLC0415
    import dns.rdataclass  # noqa: PLC0415
    import dns.rdatatype  # noqa: PLC0415

    msg = await _ask(ep, zone.apex, DS, timeout)
    rrset = msg.get_rrset(
        msg.answer, dns.name.from_text(zone.apex), dns.rdataclass.IN, dns.rdatatype.DS
    )
    if rrset is None:
        return []
    return [
        DsRecord(int(r.key_tag), int(r.algorithm), int(r.digest_type), bytes(r.digest))
        for r in rrset
    ]


@dataclass(slots=True)
class ZoneState:
    inconsistent_since: float | None = None  # monotonic seconds


def _owner_wire(apex: str) -> bytes:
    import dns.name  # noqa: PLC0415

    wire = dns.name.from_text(apex).canonicalize().to_wire()
    assert wire is not None
    return wire


class ZoneFamilies:
    """The zones collector's families, filled zone by zone."""

    def __init__(self) -> None:
        self.up = Family(
            "dnsfleet_zone_nameserver_up",
            "1 if the nameserver answered the zone's SOA authoritatively in this scrape.",
        )
        self.serial = Family("dnsfleet_zone_soa_serial", "SOA serial the nameserver serves.")
        self.refresh = Family(
            "dnsfleet_zone_soa_refresh_seconds",
            "SOA REFRESH of the newest serial: how long a secondary may lag by design.",
        )
        self.expiry = Family(
            "dnsfleet_zone_rrsig_expiry_timestamp_seconds",
            "Earliest expiration of the RRSIGs over the SOA or DNSKEY set at the nameserver.",
        )
        self.warning = Family(
            "dnsfleet_zone_signature_warning_seconds",
            "The zone's signature_warning: DNSZoneSignaturesExpiring warns within this.",
        )
        self.consistent = Family(
            "dnsfleet_zone_serial_consistent",
            "1 if every answering nameserver serves the same SOA serial (RFC 1982).",
        )
        self.drift = Family(
            "dnsfleet_zone_serial_inconsistent_seconds",
            "For how long the nameservers have served different serials (0 when consistent).",
        )
        self.ds_match = Family(
            "dnsfleet_zone_ds_match",
            "1 if every DS set at the parent's servers matches a DNSKEY at every nameserver.",
        )

    def all(self) -> list[Family]:
        return [
            self.up,
            self.serial,
            self.refresh,
            self.expiry,
            self.warning,
            self.consistent,
            self.drift,
            self.ds_match,
        ]

    def nameservers(self, zone: Zone, views: list[SoaView | BaseException]) -> list[SoaView]:
        """Per-nameserver series; the views that answered."""
        answered: list[SoaView] = []
        for ep, v in zip(zone.nameservers, views, strict=True):
            labels = {"zone": zone.apex, "nameserver": ep.key()}
            if isinstance(v, BaseException):
                unexpected = not isinstance(v, ZoneError | OSError)
                (log.warning if unexpected else log.debug)("zone %s at %s: %r", zone.apex, ep, v)
                self.up.add(0, labels)
                continue
            self.up.add(1, labels)
            answered.append(v)
            self.serial.add(v.serial, labels)
            for kind, exp in (("SOA", v.soa_rrsig_expiry), ("DNSKEY", v.dnskey_rrsig_expiry)):
                if exp is not None:
                    self.expiry.add(exp, {**labels, "type": kind})
        return answered

    def serials(self, zone: Zone, answered: list[SoaView], st: ZoneState) -> None:
        labels = {"zone": zone.apex}
        serials = [v.serial for v in answered]
        consistent = len(set(serials)) == 1
        self.consistent.add(1 if consistent else 0, labels)
        now = time.monotonic()
        if consistent:
            st.inconsistent_since = None
        elif st.inconsistent_since is None:
            st.inconsistent_since = now
        since = st.inconsistent_since
        self.drift.add(0 if since is None else now - since, labels)
        newest = newest_serial(serials)
        ref = next((v for v in answered if v.serial == newest), answered[0])
        self.refresh.add(ref.refresh, labels)

    def ds(self, zone: Zone, answered: list[SoaView], ds_sets: list[Any]) -> None:
        # DS sets as each parent server publishes them, digest types a validator knows
        # (a set of unknown ones only makes the zone insecure to validators, not bogus).
        good_ds = [
            known
            for d in ds_sets
            if not isinstance(d, BaseException)
            and (known := [r for r in d if r.digest_type in DIGESTS])
        ]
        keysets = [v.dnskeys for v in answered if v.dnskeys]
        if good_ds and keysets:
            owner = _owner_wire(zone.apex)
            # A resolver may get its DS from any parent server and its DNSKEY set from any
            # nameserver: every pair must match (a lagging secondary without the new key
            # breaks the resolvers that ask it).
            match = all(ds_matches(owner, ds, list(keys)) for ds in good_ds for keys in keysets)
            self.ds_match.add(1 if match else 0, {"zone": zone.apex})


async def collect(ctx: CollectContext) -> list[Family]:
    loop = asyncio.get_running_loop()
    state: dict[str, ZoneState] = ctx.state.setdefault(STATE_KEY, {})
    fams = ZoneFamilies()
    live = {z.apex for z in ctx.config.zones}
    for gone in set(state) - live:
        del state[gone]

    async def one(zone: Zone) -> None:
        budget = min(zone.timeout, ctx.deadline - DEADLINE_MARGIN - loop.time())
        if budget <= 0:
            return
        views, ds_sets = await asyncio.gather(
            asyncio.gather(
                *(_view(ep, zone, budget) for ep in zone.nameservers), return_exceptions=True
            ),
            asyncio.gather(
                *(_ds_set(ep, zone, budget) for ep in zone.parent_nameservers),
                return_exceptions=True,
            ),
        )
        fams.warning.add(zone.signature_warning, {"zone": zone.apex})
        answered = fams.nameservers(zone, views)
        if answered:
            fams.serials(zone, answered, state.setdefault(zone.apex, ZoneState()))
        fams.ds(zone, answered, ds_sets)

    await asyncio.gather(*(one(z) for z in ctx.config.zones))
    return fams.all()


COLLECTOR = Collector(name="zones", run=collect, enabled=lambda cfg: bool(cfg.zones))
