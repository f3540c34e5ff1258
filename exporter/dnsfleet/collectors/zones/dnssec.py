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


@dataclass(frozen=True, slots=True)
class Rrsig:
    """What the verdicts read of one RRSIG over an apex RRset whose signer is the apex: the
    key it names (RFC 4034 §3.1.6: key tag and algorithm) and its window as on the wire."""

    key_tag: int
    algorithm: int
    inception: int
    expiration: int


def signers(dnskeys: Iterable[bytes]) -> frozenset[tuple[int, int]]:
    """(key tag, algorithm) of the zone keys in a DNSKEY set: the keys an RRSIG can name
    and still validate (RFC 4035 §5.3.1: the key must be in the set, with the zone key bit)."""
    return frozenset(
        (key_tag(k), k[3]) for k in dnskeys if int.from_bytes(k[:2], "big") & ZONE_KEY_FLAG
    )


def rrset_expiry(sigs: Iterable[Rrsig], now: float, keys: frozenset[tuple[int, int]]) -> int | None:
    """What ``dnsfleet_zone_rrsig_expiry_timestamp_seconds`` says for one RRset: when a
    validator stops accepting it. A validator accepts the set while any one of its RRSIGs
    validates (RFC 4035 §5.3.3), so during a rollover (two signatures, one ending soon) it
    is the *latest* expiration among the RRSIGs valid now by a key published in the zone's
    DNSKEY set (``keys``, from :func:`signers`). When none is, the time the set stopped
    validating (the latest expiration of those by a published key that have expired, now
    for the others), so an expiry alert fires. None for an unsigned set."""
    sigs = list(sigs)
    if not sigs:
        return None
    windows = [
        (signature_window(s.inception, s.expiration, now), (s.key_tag, s.algorithm) in keys)
        for s in sigs
    ]
    if valid := [w.expiration for w, published in windows if published and w.valid]:
        return max(valid)
    # A signature by a key that is not published never validated anything here.
    return max(
        (min(w.expiration, int(now)) for w, published in windows if published), default=int(now)
    )


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


def ds_matches(
    owner_wire: bytes,
    ds_set: list[DsRecord],
    dnskeys: list[bytes],
    dnskey_rrsigs: Iterable[Rrsig],
    now: float,
) -> bool:
    """A validator's rule (RFC 4035 §5.2): some DS of a digest type it knows matches a zone
    key, and that key signs the DNSKEY set with a signature valid now. A DS naming a key
    that is published but signs nothing leaves the DNSKEY set unauthenticated: the zone is
    bogus. No DNSKEY at all (a zone unsigned with its DS left at the parent) matches
    nothing. The signature is matched by key tag, algorithm and validity window, not
    verified: the runtime carries no cryptography library."""
    active = {
        (s.key_tag, s.algorithm)
        for s in dnskey_rrsigs
        if signature_window(s.inception, s.expiration, now).valid
    }
    for ds in ds_set:
        for key in dnskeys:
            flags = int.from_bytes(key[:2], "big")
            if (
                flags & ZONE_KEY_FLAG
                and (key_tag(key), key[3]) in active
                and ds_of(owner_wire, key, ds.digest_type) == ds
            ):
                return True
    return False
