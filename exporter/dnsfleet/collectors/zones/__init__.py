"""Zone integrity at the zone's own nameservers: SOA serials compared with RFC 1982
serial arithmetic, the RRSIG validity of the SOA and DNSKEY sets, and whether a DNSKEY
matches the DS the parent publishes.

Every nameserver of every zone is asked, RD clear, DO set, EDNS 1232 (a DNSKEY set with its
signatures exceeds 512 octets), over UDP and again over TCP when truncated, each within its
own deadline and the cycle's open-file share (:mod:`.ask`); only an authoritative (AA)
answer counts. The parent's servers are asked for the zone's DS. The arithmetic is in
:mod:`.dnssec`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import dns.rdatatype
from dns.rdatatype import DNSKEY, DS, SOA

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.collectors.zones.ask import Asker, ZoneError, ZoneReason, ask, reason_of
from dnsfleet.collectors.zones.dnssec import (
    DIGESTS,
    DsRecord,
    Rrsig,
    ds_matches,
    ds_of,
    key_tag,
    newest_serial,
    rrset_expiry,
    serial_lt,
    signature_time,
    signature_window,
    signers,
)
from dnsfleet.config import Endpoint, Zone
from dnsfleet.exposition import Family

log = logging.getLogger(__name__)

STATE_KEY = "zones"

__all__ = [
    "COLLECTOR",
    "DsRecord",
    "Rrsig",
    "ZoneError",
    "ZoneReason",
    "ds_matches",
    "ds_of",
    "key_tag",
    "newest_serial",
    "rrset_expiry",
    "serial_lt",
    "signature_time",
    "signature_window",
    "signers",
    "zone_sockets",
]

Signatures = tuple[Rrsig, ...]


@dataclass(frozen=True, slots=True)
class SoaView:
    """What one nameserver says about the zone."""

    serial: int
    refresh: int
    soa_rrsigs: Signatures
    dnskeys: tuple[bytes, ...]  # DNSKEY RDATA in wire form
    dnskey_rrsigs: Signatures


def _rrsigs(msg: Any, name: Any, covers: dns.rdatatype.RdataType) -> Signatures:
    import dns.rdataclass  # noqa: PLC0415 - with dns.message, already loaded by decode

    rrset = msg.get_rrset(msg.answer, name, dns.rdataclass.IN, dns.rdatatype.RRSIG, covers=covers)
    if rrset is None:
        return ()
    # Only the zone's own signatures can validate an apex RRset (RFC 4035 §5.3.1).
    return tuple(
        Rrsig(int(sig.key_tag), int(sig.algorithm), int(sig.inception), int(sig.expiration))
        for sig in rrset
        if sig.signer == name
    )


async def _view(ep: Endpoint, zone: Zone, end: float) -> SoaView:
    import dns.flags  # noqa: PLC0415
    import dns.name  # noqa: PLC0415
    import dns.rdataclass  # noqa: PLC0415

    name = dns.name.from_text(zone.apex)
    soa_msg = await ask(ep, zone.apex, SOA, end)
    if not soa_msg.flags & dns.flags.AA:
        raise ZoneError(ZoneReason.NOT_AUTHORITATIVE, "not authoritative for the zone (no AA)")
    soa = soa_msg.get_rrset(soa_msg.answer, name, dns.rdataclass.IN, SOA)
    if soa is None or not len(soa):
        raise ZoneError(ZoneReason.NO_SOA, "no SOA in the answer")
    key_msg = await ask(ep, zone.apex, DNSKEY, end)
    rd = soa[0]
    keys = key_msg.get_rrset(key_msg.answer, name, dns.rdataclass.IN, DNSKEY)
    return SoaView(
        serial=int(rd.serial),
        refresh=int(rd.refresh),
        soa_rrsigs=_rrsigs(soa_msg, name, SOA),
        dnskeys=tuple(k.to_digestable() for k in keys) if keys is not None else (),
        dnskey_rrsigs=_rrsigs(key_msg, name, DNSKEY),
    )


async def _ds_set(ep: Endpoint, zone: Zone, end: float) -> list[DsRecord]:
    import dns.name  # noqa: PLC0415
    import dns.rdataclass  # noqa: PLC0415

    msg = await ask(ep, zone.apex, DS, end)
    rrset = msg.get_rrset(msg.answer, dns.name.from_text(zone.apex), dns.rdataclass.IN, DS)
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
        self.failure = Family(
            "dnsfleet_zone_nameserver_failure_reason",
            "1 for why the nameserver gave no usable answer in this scrape (only while it fails).",
        )
        self.expiry = Family(
            "dnsfleet_zone_rrsig_expiry_timestamp_seconds",
            "When validators stop accepting the SOA or DNSKEY set at the nameserver: the "
            "latest expiration of its RRSIGs valid now by a published key (RFC 4034 serial "
            "arithmetic); when none is valid, when the set stopped validating.",
        )
        self.warning = Family(
            "dnsfleet_zone_signature_warning_seconds",
            "The zone's signature_warning: DNSZoneSignaturesExpiring warns within this.",
        )
        self.consistent = Family(
            "dnsfleet_zone_serial_consistent",
            "1 if every nameserver answered with the same SOA serial (RFC 1982); 0 while "
            "one gives no usable answer.",
        )
        self.drift = Family(
            "dnsfleet_zone_serial_inconsistent_seconds",
            "For how long the serials have not been consistent (0 when consistent).",
        )
        self.ds_match = Family(
            "dnsfleet_zone_ds_match",
            "1 if every DS set at the parent's servers matches a DNSKEY at every nameserver "
            "that signs its DNSKEY set; 0 as well for a DS left over an unsigned zone.",
        )

    def all(self) -> list[Family]:
        return [
            self.up,
            self.failure,
            self.serial,
            self.refresh,
            self.expiry,
            self.warning,
            self.consistent,
            self.drift,
            self.ds_match,
        ]

    def nameservers(
        self, zone: Zone, views: list[SoaView | BaseException], now: float
    ) -> list[SoaView]:
        """Per-nameserver series; the views that answered. ``now``: Unix time, against
        which signature times are read."""
        answered: list[SoaView] = []
        for ep, v in zip(zone.nameservers, views, strict=True):
            labels = {"zone": zone.apex, "nameserver": ep.key()}
            if isinstance(v, BaseException):
                reason = reason_of(v)
                if reason is ZoneReason.INTERNAL_ERROR:
                    log.warning("zone %s at %s: %r", zone.apex, ep, v, exc_info=v)
                else:
                    log.debug("zone %s at %s: %s", zone.apex, ep, v)
                self.up.add(0, labels)
                self.failure.add(1, {**labels, "reason": reason.value})
                continue
            self.up.add(1, labels)
            answered.append(v)
            self.serial.add(v.serial, labels)
            keys = signers(v.dnskeys)
            for rtype, sigs in ((SOA, v.soa_rrsigs), (DNSKEY, v.dnskey_rrsigs)):
                exp = rrset_expiry(sigs, now, keys)
                if exp is not None:
                    self.expiry.add(exp, {**labels, "type": dns.rdatatype.to_text(rtype)})
        return answered

    def serials(self, zone: Zone, answered: list[SoaView], st: ZoneState, *, failed: bool) -> None:
        """``failed``: some nameserver gave no usable answer. A secondary whose copy
        expired answers SERVFAIL; left out, it would leave the others "consistent" and
        clear the drift it is the worst case of. So the serials are consistent only when
        every nameserver answered with the same one."""
        labels = {"zone": zone.apex}
        serials = [v.serial for v in answered]
        consistent = not failed and len(set(serials)) == 1
        self.consistent.add(1 if consistent else 0, labels)
        now = time.monotonic()
        if consistent:
            st.inconsistent_since = None
        elif st.inconsistent_since is None:
            st.inconsistent_since = now
        since = st.inconsistent_since
        self.drift.add(0 if since is None else now - since, labels)
        if answered:
            newest = newest_serial(serials)
            ref = next((v for v in answered if v.serial == newest), answered[0])
            self.refresh.add(ref.refresh, labels)

    def ds(self, zone: Zone, answered: list[SoaView], ds_sets: list[Any], now: float) -> None:
        # DS sets as each parent server publishes them, digest types a validator knows
        # (a set of unknown ones only makes the zone insecure to validators, not bogus).
        good_ds = [
            known
            for d in ds_sets
            if not isinstance(d, BaseException)
            and (known := [r for r in d if r.digest_type in DIGESTS])
        ]
        if good_ds and answered:
            owner = _owner_wire(zone.apex)
            # A resolver may get its DS from any parent server and its DNSKEY set from any
            # nameserver: every pair must match (a lagging secondary without the new key
            # breaks the resolvers that ask it). A nameserver serving no DNSKEY (the zone
            # was unsigned, its DS left at the parent) matches nothing.
            match = all(
                ds_matches(owner, ds, list(v.dnskeys), v.dnskey_rrsigs, now)
                for ds in good_ds
                for v in answered
            )
            self.ds_match.add(1 if match else 0, {"zone": zone.apex})


def zone_sockets(zones: tuple[Zone, ...]) -> int:
    """Sockets the zone checks would hold at once with no limit: one per nameserver and
    parent server asked (each asks one question at a time)."""
    return sum(len(z.nameservers) + len(z.parent_nameservers) for z in zones)


async def collect(ctx: CollectContext) -> list[Family]:
    loop = asyncio.get_running_loop()
    state: dict[str, ZoneState] = ctx.state.setdefault(STATE_KEY, {})
    fams = ZoneFamilies()
    live = {z.apex for z in ctx.config.zones}
    for gone in set(state) - live:
        del state[gone]
    asker = Asker(slots=ctx.sockets, hard_end=ctx.deadline - DEADLINE_MARGIN)

    async def one(zone: Zone) -> None:
        if asker.hard_end - loop.time() <= 0:
            return
        views, ds_sets = await asyncio.gather(
            asyncio.gather(
                *(asker.run(zone.timeout, partial(_view, ep, zone)) for ep in zone.nameservers),
                return_exceptions=True,
            ),
            asyncio.gather(
                *(
                    asker.run(zone.timeout, partial(_ds_set, ep, zone))
                    for ep in zone.parent_nameservers
                ),
                return_exceptions=True,
            ),
        )
        fams.warning.add(zone.signature_warning, {"zone": zone.apex})
        now = time.time()
        answered = fams.nameservers(zone, views, now)
        fams.serials(
            zone,
            answered,
            state.setdefault(zone.apex, ZoneState()),
            failed=len(answered) < len(views),
        )
        fams.ds(zone, answered, ds_sets, now)

    await asyncio.gather(*(one(z) for z in ctx.config.zones))
    return fams.all()


COLLECTOR = Collector(
    name="zones",
    run=collect,
    enabled=lambda cfg: bool(cfg.zones),
    sockets=lambda cfg: zone_sockets(cfg.zones),
)
