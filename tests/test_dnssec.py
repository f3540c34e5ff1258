"""Issue 23 against real daemons: DNSSEC validation seen from the resolver's side and
Extended DNS Errors, with a validating unbound and a non-validating one in front of BIND
serving signed zones (tests/harness/dnssec.py). One lab for the module (~3 s to start)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet import statuspage
from dnsfleet.app import Exporter
from dnsfleet.hostfs import HostFS
from tests.harness.dnssec import SignedNamed, SignedZones, make_zones, validating_unbound
from tests.harness.metrics import Samples, samples, value
from tests.harness.servers import Unbound

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
        d / "primary", {z: f for z, f in zones.files.items() if z != "example.test.b"}
    )
    secondary = SignedNamed(d / "secondary", {"example.test": zones.files["example.test.b"]})
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


def exporter(tmp_path: Path, doc: dict[str, Any]) -> Exporter:
    path = tmp_path / "dnsfleet.yml"
    path.write_text(yaml.safe_dump({"resolv_conf": [], **doc}))
    return Exporter(fs=HostFS(), config_file=str(path))


def scrape(exp: Exporter) -> Samples:
    return samples(asyncio.run(exp.scrape(8.0)).decode())


MODULES = {
    "validated": {"query_name": "www.example.test", "query_type": "A", "dnssec": "require_ad"},
    "bogus": {"query_name": "bogus.example.test", "query_type": "A", "dnssec": "expect_bogus"},
    "expired": {"query_name": "www.expired.test", "query_type": "A", "dnssec": "do"},
    "dsmismatch": {"query_name": "www.dsmismatch.test", "query_type": "A", "dnssec": "do"},
    "plain": {"query_name": "www.example.test", "query_type": "A"},
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
    page = statuspage.render(exp, metrics_path="/metrics")
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
    assert v("dnsfleet_probe_failures_total", "bogus", reason="validation_disabled") == 1
    page = statuspage.render(exp, metrics_path="/metrics")
    assert "FAIL: validation_disabled" in page
    assert "DNSResolverNotValidating.md" in page
