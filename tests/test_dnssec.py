"""Against real daemons: DNSSEC validation seen from the resolver's side,
Extended DNS Errors and zone integrity, with a validating unbound and a non-validating one
in front of BIND serving signed zones (tests/harness/dnssec.py). One lab for the module
(~3 s to start)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dnsfleet.status import page as statuspage
from tests.harness.dnssec import SignedNamed, SignedZones, make_zones, validating_unbound
from tests.harness.inprocess import exporter, scrape
from tests.harness.metrics import value
from tests.harness.servers import Unbound
from tests.harness.tools import free_port, num

pytestmark = pytest.mark.integration


@dataclass
class Lab:
    zones: SignedZones
    primary: SignedNamed  # test. and every child; example.test serial 100
    secondary: SignedNamed  # example.test serial 99 (missed a transfer)
    validating: Unbound
    plain: Unbound  # does not validate (module-config iterator)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    d = tmp_path_factory.mktemp("dnssec")
    zones = make_zones(d / "zones")
    primary = SignedNamed(
        d / "primary", zone_files={z: f for z, f in zones.files.items() if z != "example.test.b"}
    )
    secondary = SignedNamed(
        d / "secondary", zone_files={"example.test": zones.files["example.test.b"]}
    )
    started: list[Any] = []
    try:
        for s in (primary, secondary):
            started.append(s.start())
        validating = validating_unbound(d / "validating", zones, primary.address)
        plain = Unbound(d / "plain", stubs={"test.": f"127.0.0.1@{primary.port}"})
        started.append(validating.start())
        started.append(plain.start())
        yield Lab(zones, primary, secondary, validating, plain)
    finally:
        for s in reversed(started):
            s.stop()


# Generous timeouts: a busy machine must not turn a slow validation into a failure.
MODULES = {
    name: {"query_type": "A", "timeout": "5s", **spec}
    for name, spec in {
        "validated": {"query_name": "www.example.test", "dnssec": "require_ad"},
        "bogus": {"query_name": "bogus.example.test", "dnssec": "expect_bogus"},
        "expired": {"query_name": "www.expired.test", "dnssec": "do"},
        "dsmismatch": {"query_name": "www.dsmismatch.test", "dnssec": "do"},
        "plain": {"query_name": "www.example.test"},
    }.items()
}


def targets(address: str, *modules: str) -> list[dict[str, str]]:
    return [{"address": address, "module": m} for m in modules]


def test_validating_resolver(lab: Lab, tmp_path: Path) -> None:
    exp = exporter(
        tmp_path,
        {
            "modules": MODULES,
            "targets": targets(lab.validating.address, *MODULES),
        },
    )
    got = scrape(exp)

    def v(name: str, module: str, **labels: str) -> float | None:
        return value(got, name, target=lab.validating.address, module=module, **labels)

    # A signed name validates: AD, success, no EDE.
    assert v("dnsfleet_probe_success", "validated") == 1
    assert v("dnsfleet_probe_dnssec_authenticated", "validated") == 1
    # The bogus name: SERVFAIL is what a validating resolver must answer; EDE 6 says why.
    assert v("dnsfleet_probe_success", "bogus") == 1
    assert v("dnsfleet_probe_dnssec_authenticated", "bogus") == 0
    assert v("dnsfleet_probe_extended_error", "bogus", code="6") == 1
    assert v("dnsfleet_probe_extended_errors_total", "bogus", code="6") == 1
    # Expired signatures: SERVFAIL (reason rcode) with EDE 7; the DS mismatch EDE 9.
    assert v("dnsfleet_probe_failure", "expired", reason="rcode") == 1
    assert v("dnsfleet_probe_extended_error", "expired", code="7") == 1
    assert v("dnsfleet_probe_extended_error", "dsmismatch", code="9") == 1
    # Modules without dnssec export no AD gauge; the EDE families only where codes came.
    assert v("dnsfleet_probe_dnssec_authenticated", "plain") is None
    assert v("dnsfleet_probe_success", "plain") == 1
    assert not [k for k in got if k[0] == "dnsfleet_probe_extended_error" and
                ("module", "plain") in k[1]]  # fmt: skip
    # The status page shows the EDE beside the failure reason.
    page = statuspage.render(exp.status_view(), metrics_path="/metrics")
    assert "FAIL: rcode" in page
    assert "EDE 7 Signature Expired" in page
    # The counter counts answers with the code: a second scrape adds one more (unbound's
    # cached verdict says 6 now, the general code: what it sends is what is counted).
    got = scrape(exp)
    assert (
        sum(
            val
            for (name, labels), val in got.items()
            if name == "dnsfleet_probe_extended_errors_total" and ("module", "bogus") in labels
        )
        == 2
    )


def test_resolver_that_does_not_validate(lab: Lab, tmp_path: Path) -> None:
    """The failing case of each reason: an unbound without the validator module answers the
    bogus name (validation_disabled) and never sets AD (not_validated)."""
    exp = exporter(
        tmp_path,
        {"modules": MODULES, "targets": targets(lab.plain.address, "validated", "bogus")},
    )
    got = scrape(exp)

    def v(name: str, module: str, **labels: str) -> float | None:
        return value(got, name, target=lab.plain.address, module=module, **labels)

    assert v("dnsfleet_probe_success", "validated") == 0
    assert v("dnsfleet_probe_failure", "validated", reason="not_validated") == 1
    assert v("dnsfleet_probe_dnssec_authenticated", "validated") == 0
    assert v("dnsfleet_probe_success", "bogus") == 0
    assert v("dnsfleet_probe_failure", "bogus", reason="validation_disabled") == 1
    # Born at 0 in the scrape of its first failure: the next one counts it (rate() sees it).
    assert v("dnsfleet_probe_failures_total", "bogus", reason="validation_disabled") == 0
    page = statuspage.render(exp.status_view(), metrics_path="/metrics")
    assert "FAIL: validation_disabled" in page
    assert "DNSResolverNotValidating.md" in page


FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def test_signatures_that_expire_tomorrow_fail_tomorrow(lab: Lab, tmp_path: Path) -> None:
    """The expiry path with a clock one day ahead (libfaketime in the environment, so the
    PID is unbound's own; monotonic clocks stay real): soon.test, whose signatures end in
    two hours, validates today and is SERVFAIL with EDE 7 tomorrow."""
    ahead = validating_unbound(tmp_path / "ahead", lab.zones, lab.primary.address)
    ahead.env = {"LD_PRELOAD": FAKETIME, "FAKETIME": "+1d", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    ahead.start()
    try:
        modules = {
            "soon": {
                "query_name": "www.soon.test",
                "query_type": "A",
                "dnssec": "do",
                "timeout": "5s",
            }
        }
        got = scrape(
            exporter(
                tmp_path,
                {
                    "modules": modules,
                    "targets": [
                        {"address": ahead.address, "module": "soon"},
                        {"address": lab.validating.address, "module": "soon"},
                    ],
                },
            )
        )
    finally:
        ahead.stop()
    today = {"target": lab.validating.address, "module": "soon"}
    tomorrow = {"target": ahead.address, "module": "soon"}
    assert value(got, "dnsfleet_probe_dnssec_authenticated", **today) == 1
    assert value(got, "dnsfleet_probe_failure", reason="rcode", **tomorrow) == 1
    assert value(got, "dnsfleet_probe_extended_error", code="7", **tomorrow) == 1


def test_zone_integrity(lab: Lab, tmp_path: Path) -> None:
    primary, secondary = lab.primary.address, lab.secondary.address
    closed = f"127.0.0.1:{free_port()}"
    doc = {
        "targets": [],
        "zones": [
            {
                "name": "example.test",
                "nameservers": [primary, secondary],
                "parent_nameservers": [primary],
            },
            {"name": "soon.test", "nameservers": [primary], "parent_nameservers": [primary]},
            {"name": "expired.test", "nameservers": [primary]},
            {
                "name": "dsmismatch.test.",
                "nameservers": [primary, closed],
                "parent_nameservers": [primary],
                "signature_warning": "240h",
            },
        ],
    }
    exp = exporter(tmp_path, doc)
    got = scrape(exp)
    now = time.time()

    def v(name: str, **labels: str) -> float | None:
        return value(got, name, **labels)

    assert v("dnsfleet_collector_success", collector="zones") == 1
    ex = "example.test."
    assert v("dnsfleet_zone_soa_serial", zone=ex, nameserver=primary) == 100
    assert v("dnsfleet_zone_soa_serial", zone=ex, nameserver=secondary) == 99
    assert v("dnsfleet_zone_serial_consistent", zone=ex) == 0
    assert v("dnsfleet_zone_soa_refresh_seconds", zone=ex) == 3600
    assert v("dnsfleet_zone_ds_match", zone=ex) == 1
    assert v("dnsfleet_zone_serial_consistent", zone="soon.test.") == 1
    assert v("dnsfleet_zone_serial_inconsistent_seconds", zone="soon.test.") == 0
    # Earliest RRSIG expiry: exactly the end dnssec-signzone was given.
    for kind in ("SOA", "DNSKEY"):
        soon = v(
            "dnsfleet_zone_rrsig_expiry_timestamp_seconds",
            zone="soon.test.",
            nameserver=primary,
            type=kind,
        )
        assert soon == lab.zones.soon_expiry
        assert (
            num(
                v(
                    "dnsfleet_zone_rrsig_expiry_timestamp_seconds",
                    zone=ex,
                    nameserver=primary,
                    type=kind,
                )
            )
            > now + 20 * 86400
        )
        assert (
            num(
                v(
                    "dnsfleet_zone_rrsig_expiry_timestamp_seconds",
                    zone="expired.test.",
                    nameserver=primary,
                    type=kind,
                )
            )
            < now - 86400
        )
    # No parent servers given: no DS verdict at all, rather than a false one.
    assert v("dnsfleet_zone_ds_match", zone="expired.test.") is None
    # The parent publishes the DS of a key the zone lacks.
    assert v("dnsfleet_zone_ds_match", zone="dsmismatch.test.") == 0
    assert v("dnsfleet_zone_nameserver_up", zone="dsmismatch.test.", nameserver=primary) == 1
    assert v("dnsfleet_zone_nameserver_up", zone="dsmismatch.test.", nameserver=closed) == 0
    assert v("dnsfleet_zone_signature_warning_seconds", zone="dsmismatch.test.") == 240 * 3600
    assert v("dnsfleet_zone_signature_warning_seconds", zone=ex) == 7 * 86400
    # The drift is timed from the first scrape that saw it.
    time.sleep(0.2)
    again = scrape(exp)
    assert num(value(again, "dnsfleet_zone_serial_inconsistent_seconds", zone=ex)) >= 0.2
