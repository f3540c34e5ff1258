"""Pure DNSSEC arithmetic of the zone checks: RFC 1982 serials, signature times read as
RFC 4034 §3.1.5 says (32-bit serial numbers relative to now), key tags and DS digests.

The DS digest is computed with hashlib (RFC 4034 5.1.4: the digest of the owner name in
canonical wire form followed by the DNSKEY RDATA), not ``dns.dnssec.make_ds``: importing
``dns.dnssec`` pulls in ``cryptography`` when it is installed (+8 MiB RSS), and its default
policy refuses SHA-1 digests, which parents still publish. tests/test_zones.py checks the
two agree for digest types 1, 2 and 4.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

ZONE_KEY_FLAG = 0x0100  # DNSKEY flags bit 7 (RFC 4034 2.1.1)
DIGESTS = {1: hashlib.sha1, 2: hashlib.sha256, 4: hashlib.sha384}
SPACE = 2**32
HALF = 2**31


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


def signature_time(value: int, now: float) -> int:
    """The Unix time a 32-bit RRSIG inception or expiration field stands for: RFC 4034
    §3.1.5 compares them with serial arithmetic, so the field names the instant within
    2**31 seconds of ``now`` (0xFFFFFFFF is one second before 1970 in 2026, not 2106).
    The one value at distance exactly 2**31 is undefined (RFC 1982): read as the past,
    so it never makes a signature valid."""
    base = int(now)
    d = (value - base) % SPACE
    return base + (d - SPACE if d >= HALF else d)


@dataclass(frozen=True, slots=True)
class SignatureTimes:
    """One RRSIG's validity window as Unix times, and whether ``now`` lies in it."""

    inception: int
    expiration: int
    valid: bool


def signature_window(inception: int, expiration: int, now: float) -> SignatureTimes:
    """An RRSIG is valid only from its inception to its expiration (RFC 4034 §3.1.5,
    RFC 4035 §5.3.1): one not yet valid or already expired validates nothing."""
    start, end = signature_time(inception, now), signature_time(expiration, now)
    return SignatureTimes(start, end, start <= now <= end)


def rrset_expiry(fields: Iterable[tuple[int, int]], now: float) -> int | None:
    """What ``dnsfleet_zone_rrsig_expiry_timestamp_seconds`` says for one RRset signed by
    RRSIGs with these (inception, expiration) fields: the earliest expiration among the
    signatures valid now; when none is, the time the set stopped validating (the latest
    expiration of the expired ones, now for one not yet valid), so an expiry alert fires.
    None for an unsigned set."""
    windows = [signature_window(i, e, now) for i, e in fields]
    if not windows:
        return None
    valid = [w.expiration for w in windows if w.valid]
    if valid:
        return min(valid)
    return max(min(w.expiration, int(now)) for w in windows)


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
