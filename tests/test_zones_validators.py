"""The zone checks judged against what a validator does, on real daemons: BIND serving zones
signed by dnssec-signzone (tests/harness/dnssec.py) and a validating unbound that says what
validators answer. A rollover's double signatures, a DS naming a KSK that signs nothing, a
DS left over an unsigned zone, and nameservers that answer REFUSED or nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from tests.harness.dnssec import SignedNamed, SignedZones, make_zones, validating_unbound
from tests.harness.inprocess import exporter, scrape
from tests.harness.metrics import value
from tests.harness.servers import Blackhole, Unbound

pytestmark = pytest.mark.integration


@dataclass
class Lab:
    zones: SignedZones
    primary: SignedNamed  # test. and every child
    other: SignedNamed  # serves example.test only: REFUSED for any other zone
    validating: Unbound


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    d = tmp_path_factory.mktemp("zonesig")
    zones = make_zones(d / "zones")
    primary = SignedNamed(
        d / "primary", zone_files={z: f for z, f in zones.files.items() if z != "example.test.b"}
    )
    other = SignedNamed(d / "other", zone_files={"example.test": zones.files["example.test"]})
    started: list[Any] = []
    try:
        started.append(primary.start())
        started.append(other.start())
        validating = validating_unbound(d / "validating", zones, primary.address)
        started.append(validating.start())
        yield Lab(zones, primary, other, validating)
    finally:
        for s in reversed(started):
            s.stop()


def resolve(lab: Lab, name: str) -> dns.message.Message:
    host, port = lab.validating.address.rsplit(":", 1)
    q = dns.message.make_query(name, "A", want_dnssec=True)
    return dns.query.udp(q, host, port=int(port), timeout=10)


def test_validators_accept_the_rollover_and_fail_the_ds_cases(lab: Lab) -> None:
    """What the zones are to a validator, so the checks below are held to the truth."""
    r = resolve(lab, "www.rollover.test.")
    assert (r.rcode(), bool(r.flags & dns.flags.AD)) == (dns.rcode.NOERROR, True)
    for bogus in ("www.ksknosign.test.", "www.unsigned.test."):
        assert resolve(lab, bogus).rcode() == dns.rcode.SERVFAIL, bogus


def test_zone_checks_agree_with_validators(lab: Lab, tmp_path: Path) -> None:
    primary = lab.primary.address
    hole = Blackhole()
    try:
        doc = {
            "targets": [],
            "zones": [
                {"name": z, "nameservers": [primary], "parent_nameservers": [primary]}
                for z in ("rollover.test", "ksknosign.test", "unsigned.test")
            ]
            + [
                {
                    "name": "soon.test",
                    "nameservers": [primary, lab.other.address, hole.address],
                    "timeout": "2s",
                }
            ],
        }
        got = scrape(exporter(tmp_path, doc))
    finally:
        hole.close()

    def v(name: str, **labels: str) -> float | None:
        return value(got, name, **labels)

    assert v("dnsfleet_collector_success", collector="zones") == 1
    # The rollover: A's signatures end in two hours, B's in thirty days. Validators
    # accept the sets until B's end, which is what is exported (A's end paged before).
    _, b_end = lab.zones.rollover_expiries
    for kind in ("SOA", "DNSKEY"):
        labels = {"zone": "rollover.test.", "nameserver": primary, "type": kind}
        assert v("dnsfleet_zone_rrsig_expiry_timestamp_seconds", **labels) == b_end
    assert v("dnsfleet_zone_ds_match", zone="rollover.test.") == 1
    # The parent's DS names a KSK that is published but signs nothing (1 before).
    assert v("dnsfleet_zone_ds_match", zone="ksknosign.test.") == 0
    # The zone was unsigned, its DS left at the parent (no verdict before).
    assert v("dnsfleet_zone_ds_match", zone="unsigned.test.") == 0
    assert v("dnsfleet_zone_nameserver_up", zone="unsigned.test.", nameserver=primary) == 1
    # A nameserver that does not serve the zone answers REFUSED, a silent one nothing:
    # both are failures, and the serials are not consistent while they fail (1 before).
    soon = {"zone": "soon.test."}
    assert v("dnsfleet_zone_nameserver_up", nameserver=primary, **soon) == 1
    refusing = {"nameserver": lab.other.address, **soon}
    assert v("dnsfleet_zone_nameserver_up", **refusing) == 0
    assert v("dnsfleet_zone_nameserver_failure_reason", reason="rcode", **refusing) == 1
    silent = {"nameserver": hole.address, **soon}
    assert v("dnsfleet_zone_nameserver_up", **silent) == 0
    assert v("dnsfleet_zone_nameserver_failure_reason", reason="timeout", **silent) == 1
    assert v("dnsfleet_zone_serial_consistent", **soon) == 0
    assert v("dnsfleet_zone_soa_refresh_seconds", **soon) == 3600
