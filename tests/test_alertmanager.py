"""alerts/alertmanager.yml: `amtool check-config`, routing cases with `amtool config routes
test`, and every inhibition rule against a real Alertmanager fed alerts over its API."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.monitoring import (
    ALERTMANAGER_YML,
    Alertmanager,
    Webhook,
    alertmanager_config,
    http_get,
)
from tests.harness.tools import binary

pytestmark = pytest.mark.integration


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("amtool"), *args], capture_output=True, text=True, timeout=60)


def test_check_config() -> None:
    out = amtool("check-config", str(ALERTMANAGER_YML))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "7 inhibit rules" in out.stdout


def burn(severity: str, site: str, source: str, slo: str = "availability") -> dict[str, str]:
    """The labels of a generated burn-rate alert (alerts/rules/slo.rules.yml)."""
    long, short = {"critical": ("1h", "5m"), "warning": ("1d", "2h")}[severity]
    return {
        "alertname": f"DNS{slo.capitalize()}BudgetBurn",
        "severity": severity,
        "site": site,
        "slo": slo,
        "source": source,
        "long": long,
        "short": short,
    }


ROUTES = [
    # (labels, expected receiver)
    ({"alertname": "DNSResolverDown", "severity": "warning", "site": "ams"}, "ticket"),
    ({"alertname": "DNSSiteDown", "severity": "critical", "site": "ams"}, "pager"),
    (
        burn("critical", "ams", "probe"),
        "pager",
    ),
    (
        burn("warning", "ams", "stub", slo="latency"),
        "ticket",
    ),
    ({"alertname": "DNSResolverRestartLoop", "severity": "warning", "site": "ams"}, "ticket"),
    ({"alertname": "DNSFleetExportersAbsent", "severity": "critical"}, "pager"),
    ({"alertname": "DNSStubFailoverDelay", "severity": "warning", "site": "ams"}, "ticket"),
    ({"alertname": "DNSBondDegraded", "severity": "warning", "site": "ams"}, "ticket"),
    ({"alertname": "DNSResolverRestarted", "severity": "warning"}, "ticket"),
    ({"alertname": "SomethingInformative", "severity": "info"}, "blackhole"),
    ({"alertname": "NoSeverityAtAll"}, "blackhole"),
    ({"alertname": "Watchdog", "severity": "info"}, "heartbeat"),
]


@pytest.mark.parametrize(
    ("labels", "receiver"), ROUTES, ids=[f"{r[0]['alertname']}-{r[1]}" for r in ROUTES]
)
def test_routes(labels: dict[str, str], receiver: str) -> None:
    out = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={ALERTMANAGER_YML}",
        f"--verify.receivers={receiver}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == receiver


@pytest.fixture(scope="module")
def am(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Alertmanager]:
    work: Path = tmp_path_factory.mktemp("am")
    hook = Webhook().start()
    a = Alertmanager(work, alertmanager_config(hook)).start()
    yield a
    a.stop()
    hook.stop()


def test_grouping_is_by_alertname_and_site(am: Alertmanager) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    alerts = [
        ("DNSResolverDown", "grp-ams", "h1"),
        ("DNSResolverDown", "grp-ams", "h2"),
        ("DNSResolverDown", "grp-fra", "h3"),
        ("DNSResolverLatencyHigh", "grp-ams", "h1"),
    ]
    am.post(
        [
            {
                "labels": {
                    "alertname": a,
                    "severity": "critical",
                    "site": s,
                    "instance": f"{i}:9853",
                },
                "startsAt": now,
            }
            for a, s, i in alerts
        ]
    )
    groups: dict[tuple[str, str], int] = {}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        groups = {
            (g["labels"].get("alertname", ""), g["labels"].get("site", "")): len(g["alerts"])
            for g in http_get(am.url + "/api/v2/alerts/groups")
            if g["receiver"]["name"] == "pager" and g["labels"].get("site", "").startswith("grp-")
        }
        if sum(groups.values()) == len(alerts):
            break
        time.sleep(0.2)
    assert groups == {
        ("DNSResolverDown", "grp-ams"): 2,
        ("DNSResolverDown", "grp-fra"): 1,
        ("DNSResolverLatencyHigh", "grp-ams"): 1,
    }


# Each case: alerts posted together; which of them must end up inhibited. Every case uses
# its own alertname suffix-free labels in a fresh `case` label so cases do not interact.
INHIBITION = {
    "site down mutes that site's resolver, stub and host alerts": (
        [
            {"alertname": "DNSSiteDown", "severity": "critical", "site": "ams"},
            {
                "alertname": "DNSResolverDown",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "target": "192.0.2.1:53",
            },
            {
                "alertname": "DNSStubResolutionFailing",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "resolv_conf": "/etc/resolv.conf",
                "libc": "glibc",
            },
            {
                "alertname": "DNSBondDegraded",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "bond": "bond0",
            },
            {
                "alertname": "DNSCpuLatencyDrift",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
            },
            # other site, and not a per-resolver/per-host alert: not muted
            {
                "alertname": "DNSResolverDown",
                "severity": "warning",
                "site": "fra",
                "instance": "h2:9853",
                "target": "198.51.100.1:53",
            },
            {
                "alertname": "DNSConsulNoLeader",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "agent": "local",
            },
            # the site's burn-rate alerts, page and ticket: muted; another site's: not
            burn("critical", "ams", "probe"),
            burn("warning", "ams", "stub", slo="latency"),
            burn("critical", "fra", "probe"),
        ],
        {1, 2, 3, 4, 7, 8},
    ),
    "a fast burn mutes the slow burn of the same SLI at the same site only": (
        [
            burn("critical", "ams", "resolver"),
            burn("warning", "ams", "resolver"),
            burn("warning", "ams", "stub"),
            burn("warning", "fra", "resolver"),
            burn("warning", "ams", "resolver", slo="latency"),
        ],
        {1},
    ),
    "a site-down without a site mutes nothing (equal on an absent label)": (
        [
            {"alertname": "DNSSiteDown", "severity": "critical"},
            {
                "alertname": "DNSResolverDown",
                "severity": "warning",
                "instance": "h1:9853",
                "target": "192.0.2.1:53",
            },
        ],
        set(),
    ),
    "exporter down mutes the alerts of that instance only": (
        [
            {
                "alertname": "DNSFleetExporterDown",
                "severity": "critical",
                "site": "ams",
                "instance": "h1:9853",
                "job": "dnsfleet",
            },
            {
                "alertname": "DNSFleetCollectorFailing",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "collector": "stub",
            },
            {
                "alertname": "DNSStubFailoverDelay",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "resolv_conf": "/etc/resolv.conf",
                "libc": "glibc",
            },
            {
                "alertname": "DNSStubFailoverDelay",
                "severity": "warning",
                "site": "ams",
                "instance": "h2:9853",
                "resolv_conf": "/etc/resolv.conf",
                "libc": "glibc",
            },
            {
                "alertname": "DNSFleetExporterDown",
                "severity": "critical",
                "site": "ams",
                "instance": "h3:9853",
                "job": "dnsfleet",
            },
        ],
        {1, 2},
    ),
    "critical mutes the warning of the same alert and thing, not of another": (
        [
            {
                "alertname": "DNSFleetTargetsDropped",
                "severity": "critical",
                "site": "ams",
                "instance": "h1:9853",
                "job": "dnsfleet",
            },
            {
                "alertname": "DNSFleetTargetsDropped",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "job": "dnsfleet",
            },
            {
                "alertname": "DNSFleetTargetsDropped",
                "severity": "warning",
                "site": "ams",
                "instance": "h2:9853",
                "job": "dnsfleet",
            },
            {
                "alertname": "DNSFleetConfigReloadFailed",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "job": "dnsfleet",
            },
        ],
        {1},
    ),
    "a resolver down mutes its own other resolver alerts, not a site-mate's": (
        [
            {
                "alertname": "DNSResolverDown",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "target": "10.0.0.1:53",
            },
            # Read by another exporter: still the same resolver.
            {
                "alertname": "DNSResolverStatsUnreadable",
                "severity": "warning",
                "site": "ams",
                "instance": "h2:9853",
                "target": "10.0.0.1:53",
            },
            {
                "alertname": "DNSResolverCanaryUnusable",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "target": "10.0.0.1:53",
                "module": "canary",
            },
            {
                "alertname": "DNSResolverProbeFailuresHigh",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "target": "10.0.0.1:53",
            },
            {
                "alertname": "DNSResolverStatsUnreadable",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "target": "10.0.0.2:53",
            },
            {
                "alertname": "DNSResolverRestarted",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "target": "10.0.0.1:53",
            },
        ],
        {1, 2, 3},
    ),
    "the stub latency page mutes the site's failover-delay tickets, no other site's": (
        [
            burn("critical", "ams", "stub", slo="latency"),
            {
                "alertname": "DNSStubFailoverDelay",
                "severity": "warning",
                "site": "ams",
                "instance": "h1:9853",
                "resolv_conf": "/etc/resolv.conf",
                "libc": "glibc",
            },
            {
                "alertname": "DNSStubFailoverDelay",
                "severity": "warning",
                "site": "fra",
                "instance": "h9:9853",
                "resolv_conf": "/etc/resolv.conf",
                "libc": "glibc",
            },
            burn("critical", "fra", "probe", slo="latency"),
        ],
        {1},
    ),
    "the 1h page mutes the 6h page of the same SLO and source": (
        [
            burn("critical", "ams", "stub", slo="latency"),
            burn("critical", "ams", "stub", slo="latency") | {"long": "6h", "short": "30m"},
            burn("critical", "ams", "probe", slo="latency") | {"long": "6h", "short": "30m"},
        ],
        {1},
    ),
}


@pytest.mark.parametrize("case", list(INHIBITION))
def test_inhibition(am: Alertmanager, case: str) -> None:
    alerts, muted = INHIBITION[case]
    tag = f"c{abs(hash(case)) % 10**8}"
    # Cases must not see each other's sources: each lives in its own `site` namespace
    # when it has a site, and its own instance suffix otherwise.
    posted: list[dict[str, Any]] = []
    for a in alerts:
        labels = dict(a)
        if "site" in labels:
            labels["site"] = f"{labels['site']}-{tag}"
        if "instance" in labels:
            labels["instance"] = f"{labels['instance']}-{tag}"
        labels["case"] = tag
        posted.append(
            {
                "labels": labels,
                "annotations": {"summary": "test"},
                "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
    am.post(posted)
    want = {i for i in range(len(posted))}
    got: dict[int, bool] = {}
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        active = {
            frozenset(a["labels"].items()): bool(a["status"]["inhibitedBy"])
            for a in am.alerts()
            if a["labels"].get("case") == tag
        }
        got = {
            i: active[frozenset(p["labels"].items())]
            for i, p in enumerate(posted)
            if frozenset(p["labels"].items()) in active
        }
        if set(got) == want and {i for i, m in got.items() if m} == muted:
            break
        time.sleep(0.2)
    assert set(got) == want, f"not all alerts active in Alertmanager: {got}"
    assert {i for i, m in got.items() if m} == muted, (
        f"inhibited {sorted(i for i, m in got.items() if m)}, want {sorted(muted)}"
    )
