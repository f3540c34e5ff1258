"""Issue 23, pure: RFC 1982 serial arithmetic, the hand-written DS digest and key tag
against dnspython's dns.dnssec, and the `zones` section's errors."""

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
    ds_matches,
    ds_of,
    key_tag,
    newest_serial,
    serial_lt,
)
from dnsfleet.config import ConfigError

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


def test_ds_match_rules() -> None:
    owner = OWNER.canonicalize().to_wire() or b""
    ksk, zsk = (dnskey(t).to_digestable() for t in KEYS[:2])
    ds = ds_of(owner, ksk, 2)
    assert ds is not None
    assert ds_matches(owner, [ds], [ksk, zsk])
    assert not ds_matches(owner, [ds], [zsk])  # the key the DS names is gone
    other = dns.name.from_text("other.test.").to_wire() or b""
    assert not ds_matches(other, [ds], [ksk])  # same key, other owner: another digest
    # A key without the zone key bit never matches (RFC 4034 2.1.1).
    not_zone = bytes([ksk[0] & 0xFE]) + ksk[1:]
    assert not ds_matches(owner, [ds], [not_zone])
    assert ds_of(owner, ksk, 3) is None  # GOST: not known here


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
