"""Zone integrity, pure: RFC 1982 serial arithmetic, signature times read as RFC 4034 §3.1.5 says,
the hand-written DS digest and key tag against dnspython's dns.dnssec, the zone checks'
share of the open-file budget, and the `zones` section's errors."""

from __future__ import annotations

import re
from pathlib import Path

import dns.dnssec
import dns.dnssectypes
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import pytest

from dnsfleet import config
from dnsfleet.collectors.zones import (
    DsRecord,
    Rrsig,
    ds_matches,
    ds_of,
    key_tag,
    newest_serial,
    rrset_expiry,
    serial_lt,
    signature_window,
    signers,
)
from dnsfleet.config import ConfigError
from dnsfleet.selfmetrics import share_descriptors

pytestmark = pytest.mark.unit

# Real DNSKEYs (a KSK and a ZSK of the test lab's example.test, ECDSAP256SHA256) and an
# RSA one (algorithm 8), as dnssec-keygen wrote them.
KEYS = [
    "257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+ "
    "KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==",
    "256 3 13 oJMRESz5E7gP5k0MadKR5GEWvv4yNkbBYTWj7v3xaAz+uh6EYbyP1t7L "
    "zqr0kRkU23XcRsuuSaAxx8lHqqsBDQ==",
    "257 3 8 AwEAAagAIKlVZrpC6Ia7gEzahOR+9W29euxhJhVVLOyQbSEW0O8gcCjF "
    "FVQUTf6v58fLjwBd0YI0EzrAcQqBGCzh/RStIoO8g0NfnfL2MTJRkxoX bfDaUeVPQuYEhg37NZWA"
    "JQ9VnMVDxP/VHL496M/QZxkjf5/Efucp2gaD X6RS6CXpoY68LsvPVjR0ZSwzz1apAzvN9dlzEheX7I"
    "CJBBtuA6G3LQpz W5hOA2hzCTMjJPJ8LbqF6dsV6DoBQzgul0sGIcGOYl7OyQdXfZ57relS Qageu+ip"
    "AdTTJ25AsRTAoub8ONGcLmqrAmRLKBP1dfwhYB4N7knNnulq QxA+Uk1ihz0=",
]
OWNER = dns.name.from_text("example.test.")


def dnskey(text: str) -> dns.rdata.Rdata:
    return dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.DNSKEY, text)


@pytest.mark.parametrize("text", KEYS)
@pytest.mark.parametrize("digest_type", [1, 2, 4])
def test_ds_and_key_tag_equal_dnspython(text: str, digest_type: int) -> None:
    key = dnskey(text)
    wire = key.to_digestable()
    ours = ds_of(OWNER.canonicalize().to_wire() or b"", wire, digest_type)
    digest = dns.dnssectypes.DSDigest(digest_type)
    theirs = dns.dnssec.make_ds(OWNER, key, digest, policy=dns.dnssec.allow_all_policy)
    assert ours == DsRecord(
        theirs.key_tag, theirs.algorithm, theirs.digest_type, bytes(theirs.digest)
    )
    assert key_tag(wire) == dns.dnssec.key_id(key)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "lt"),
    [
        (1, 2, True),
        (2, 1, False),
        (5, 5, False),
        (4294967290, 5, True),  # across the wrap
        (5, 4294967290, False),
        (0, 2**31 - 1, True),
        (0, 2**31, False),  # distance 2**31: undefined, neither is less
        (2**31, 0, False),
    ],
)
def test_serial_arithmetic(a: int, b: int, lt: bool) -> None:
    assert serial_lt(a, b) is lt


def test_newest_serial() -> None:
    assert newest_serial([100, 99, 100]) == 100
    assert newest_serial([4294967290, 5]) == 5
    assert newest_serial([0, 2**31]) is None
    assert newest_serial([7]) == 7


NOW = 1_795_000_000  # 2026-11-18
WRAP = 2**32  # 2106-02-07T06:28:16Z: the 32-bit fields wrap to 0
DAY = 86400


@pytest.mark.parametrize(
    ("inception", "expiration", "now", "window"),
    [
        # (fields as on the wire, now) -> (inception, expiration as Unix times, valid)
        (NOW - 3600, NOW + DAY, NOW, (NOW - 3600, NOW + DAY, True)),
        (NOW - 3600, 0xFFFFFFFF, NOW, (NOW - 3600, -1, False)),  # not 2106: 1969, expired
        (NOW + 3600, NOW + DAY, NOW, (NOW + 3600, NOW + DAY, False)),  # not yet valid
        (NOW - 10 * DAY, NOW - DAY, NOW, (NOW - 10 * DAY, NOW - DAY, False)),  # expired
        (NOW, NOW, NOW, (NOW, NOW, True)),  # both ends inclusive
        (NOW - DAY, NOW + 2**31 - 1, NOW, (NOW - DAY, NOW + 2**31 - 1, True)),
        # Distance 2**31 is undefined in RFC 1982: never read as the future.
        (NOW - DAY, (NOW + 2**31) % WRAP, NOW, (NOW - DAY, NOW - 2**31, False)),
        # Across the wrap: signed just before it, expiring after it.
        (WRAP - 1000, 500, WRAP - 100, (WRAP - 1000, WRAP + 500, True)),
        (WRAP - 500, 5000, WRAP + 1000, (WRAP - 500, WRAP + 5000, True)),
        (WRAP - 500, 5000, WRAP + 6000, (WRAP - 500, WRAP + 5000, False)),
        # Expiration before inception: valid at no time.
        (NOW + DAY, NOW - DAY, NOW, (NOW + DAY, NOW - DAY, False)),
    ],
)
def test_signature_window(
    inception: int, expiration: int, now: int, window: tuple[int, int, bool]
) -> None:
    w = signature_window(inception, expiration, now)
    assert (w.inception, w.expiration, w.valid) == window


KSK_TEXT, ZSK_TEXT = KEYS[:2]
KSK, ZSK = (dnskey(t).to_digestable() for t in (KSK_TEXT, ZSK_TEXT))
A, B = (key_tag(k) for k in (KSK, ZSK))  # both ECDSAP256SHA256 (13)
PUBLISHED = signers([KSK, ZSK])


def sig(tag: int, inception: int, expiration: int, algorithm: int = 13) -> Rrsig:
    return Rrsig(tag, algorithm, inception, expiration)


@pytest.mark.parametrize(
    ("sigs", "exported"),
    [
        ([], None),  # unsigned
        # A rollover: two signatures valid now. A validator accepts the set while either
        # validates, so the later one is when it stops (the earlier was exported before).
        ([sig(A, NOW - DAY, NOW + 2 * 3600), sig(B, NOW - DAY, NOW + 30 * DAY)], NOW + 30 * DAY),
        ([sig(B, NOW - DAY, NOW + 5 * DAY), sig(A, NOW - DAY, NOW + 3 * DAY)], NOW + 5 * DAY),
        # An expired signature beside a valid one: the set still validates.
        ([sig(A, NOW - 9 * DAY, NOW - DAY), sig(B, NOW - DAY, NOW + 3 * DAY)], NOW + 3 * DAY),
        # One not yet valid beside a valid one: only the valid one counts.
        ([sig(A, NOW + 3600, NOW + 30 * DAY), sig(B, NOW - DAY, NOW + 5 * DAY)], NOW + 5 * DAY),
        # A later signature by a key no longer published validates nothing.
        ([sig(A, NOW - DAY, NOW + 3600), sig(4242, NOW - DAY, NOW + 30 * DAY)], NOW + 3600),
        ([sig(A, NOW - DAY, NOW + 3600), sig(A, NOW - DAY, NOW + 30 * DAY, 8)], NOW + 3600),
        # None valid: when the set stopped validating, so the expiry alert fires.
        ([sig(A, NOW - DAY, 0xFFFFFFFF)], -1),
        ([sig(A, NOW + 3600, NOW + 30 * DAY)], NOW),
        ([sig(A, NOW - 9 * DAY, NOW - DAY), sig(B, NOW - 9 * DAY, NOW - 5)], NOW - 5),
        ([sig(4242, NOW - DAY, NOW + 30 * DAY)], NOW),  # only by an unpublished key
        ([sig(A, NOW - 9 * DAY, NOW - DAY), sig(4242, NOW - DAY, NOW + DAY)], NOW - DAY),
    ],
)
def test_rrset_expiry(sigs: list[Rrsig], exported: int | None) -> None:
    assert rrset_expiry(sigs, NOW, PUBLISHED) == exported


def test_signers_are_the_zone_keys() -> None:
    assert signers([KSK, ZSK]) == {(A, 13), (B, 13)}
    not_zone = bytes([KSK[0] & 0xFE]) + KSK[1:]  # zone key bit clear (RFC 4034 2.1.1)
    assert signers([not_zone]) == frozenset()


OWNER_WIRE = OWNER.canonicalize().to_wire() or b""
DS_KSK = ds_of(OWNER_WIRE, KSK, 2)
DS_ZSK = ds_of(OWNER_WIRE, ZSK, 2)
SIGNED_BY_KSK = [sig(A, NOW - DAY, NOW + 30 * DAY)]


@pytest.mark.parametrize(
    ("ds", "keys", "dnskey_sigs", "match"),
    [
        ([DS_KSK], [KSK, ZSK], SIGNED_BY_KSK, True),
        ([DS_KSK], [ZSK], [sig(B, NOW - DAY, NOW + DAY)], False),  # the key is gone
        # Published but signing nothing: the DNSKEY set is signed by the ZSK only.
        ([DS_KSK], [KSK, ZSK], [sig(B, NOW - DAY, NOW + 30 * DAY)], False),
        ([DS_ZSK], [KSK, ZSK], SIGNED_BY_KSK, False),
        # One DS of two matching a signing key is enough (a DS rollover).
        ([DS_ZSK, DS_KSK], [KSK, ZSK], SIGNED_BY_KSK, True),
        # Its signature over the DNSKEY set expired, or not yet valid: no chain of trust.
        ([DS_KSK], [KSK, ZSK], [sig(A, NOW - 9 * DAY, NOW - DAY)], False),
        ([DS_KSK], [KSK, ZSK], [sig(A, NOW + 3600, NOW + 30 * DAY)], False),
        # A signature naming the key's tag with another algorithm is not by that key.
        ([DS_KSK], [KSK, ZSK], [sig(A, NOW - DAY, NOW + DAY, 8)], False),
        # The zone was unsigned and the DS left at the parent: no DNSKEY at all.
        ([DS_KSK], [], [], False),
        # A key without the zone key bit never matches (RFC 4034 2.1.1).
        ([DS_KSK], [bytes([KSK[0] & 0xFE]) + KSK[1:]], SIGNED_BY_KSK, False),
    ],
)
def test_ds_match(
    ds: list[DsRecord], keys: list[bytes], dnskey_sigs: list[Rrsig], match: bool
) -> None:
    assert ds_matches(OWNER_WIRE, ds, keys, dnskey_sigs, NOW) is match


def test_ds_of_other_owner_and_unknown_digest() -> None:
    other = dns.name.from_text("other.test.").to_wire() or b""
    assert DS_KSK is not None
    assert not ds_matches(other, [DS_KSK], [KSK], SIGNED_BY_KSK, NOW)  # another digest
    assert ds_of(OWNER_WIRE, KSK, 3) is None  # GOST: not known here


@pytest.mark.parametrize(
    ("cap", "probes", "zones", "shares"),
    [
        (1024, 10, 0, (1024, 0)),
        (1024, 10, 20, (1004, 20)),  # both fit: the zones take what they need
        (100, 900, 100, (90, 10)),  # neither fits: in proportion
        (182, 1, 601, (1, 181)),  # 600 silent zones under `ulimit -n 512`
        (1, 5, 5, (1, 1)),  # at least one each
    ],
)
def test_zone_sockets_share_the_cycle_budget(
    cap: int, probes: int, zones: int, shares: tuple[int, int]
) -> None:
    assert share_descriptors(cap, probes=probes, zones=zones) == shares


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "zones: [{name: example.com}]",
            'zones[0].nameservers: zone "example.com" has no nameserver: list the addresses '
            "of its authoritative servers (names are not resolved)",
        ),
        (
            "zones: [{name: example.com, nameservers: [ns1.example.com]}]",
            'zones[0].nameservers[0]: "ns1.example.com" is not an IP address (names are not '
            "resolved)",
        ),
        (
            "zones: [{name: example.com, nameservers: [192.0.2.1, '192.0.2.1:53']}]",
            "zones[0].nameservers[1]: 192.0.2.1:53 is listed twice",
        ),
        (
            "zones: [{name: a.test, nameservers: [192.0.2.1]}, {name: A.test., nameservers: "
            "[192.0.2.2]}]",
            'zones[1]: zone "A.test." is listed twice',
        ),
        (
            "zones: [{name: a.test, nameservers: [192.0.2.1], signature_warning: 30m}]",
            "zones[0].signature_warning:",
        ),
    ],
)
def test_zone_config_errors(tmp_path: Path, body: str, message: str) -> None:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(body + "\n")
    with pytest.raises(ConfigError) as exc:
        config.load(p)
    # The line and column are the loader's (tests/test_config.py checks them).
    got = re.sub(r"^(.*?\.yml):\d+:\d+: ", r"\1: ", str(exc.value))
    assert got.startswith(f"{p}: {message}"), str(exc.value)


def test_zones_alone_are_something_to_monitor(tmp_path: Path) -> None:
    p = tmp_path / "dnsfleet.yml"
    p.write_text("zones: [{name: example.com, nameservers: ['[2001:db8::1]:5353']}]\n")
    cfg = config.load(p)
    assert cfg.zones[0].apex == "example.com."
    assert cfg.zones[0].nameservers[0].key() == "[2001:db8::1]:5353"
