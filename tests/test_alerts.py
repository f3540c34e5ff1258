"""The alerting suite against real promtool: rules check, unit tests, and the conventions
every alert must follow (severity, static summary, templated description, a runbook that
exists with its four sections, and a promtool test that fires it and one that does not)."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from alerts.generate import CONFIG, load_config

from tests.harness.gotools import prometheus3_tool
from tests.harness.tools import binary

ROOT = Path(__file__).resolve().parent.parent
RULES = sorted((ROOT / "alerts" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.yml"))
RUNBOOKS = ROOT / "alerts" / "runbooks"
# The runbook base URL the committed rules were generated with (alerts/config.yml).
RUNBOOK_BASE = load_config(CONFIG).runbook_base_url
SEVERITIES = {"critical", "warning", "info"}
SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")


@functools.cache
def _rule_groups() -> tuple[dict[str, Any], ...]:
    """The rule files' groups, parsed once for all the tests that read them."""
    return tuple(g for f in RULES for g in yaml.safe_load(f.read_text())["groups"])


def alerting_rules() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for group in _rule_groups():
        out.extend(r for r in group["rules"] if "alert" in r)
    return out


@pytest.mark.unit
def test_rule_files_exist() -> None:
    assert RULES, "no rule files in alerts/rules"


@pytest.mark.integration
@pytest.mark.parametrize("version", ["2", "3"], ids=lambda v: f"prometheus{v}")
@pytest.mark.parametrize("path", RULES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path, version: str) -> None:
    out = subprocess.run(
        [promtool(version), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def promtool(version: str) -> str:
    """Debian's promtool (Prometheus 2) or Prometheus 3's, built from the module proxy:
    3 reads range windows left-open and classic histograms' `le` as floats."""
    return binary("promtool") if version == "2" else prometheus3_tool("promtool")


@pytest.mark.integration
@pytest.mark.parametrize("version", ["2", "3"], ids=lambda v: f"prometheus{v}")
@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(path: Path, version: str) -> None:
    out = subprocess.run(
        [promtool(version), "test", "rules", path.name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr


# The other evaluation intervals a Prometheus server is run at. The SLO files are left out
# here: test_slo_scenarios.py runs their rules at each of these intervals over whole
# scenarios. capacity_trend's weeks of history at 15 s outlast any timeout, and it raises
# tickets only.
OTHER_INTERVALS = ("15s", "30s")
AT_EVERY_INTERVAL = [
    p
    for p in RULE_TESTS
    if p.name not in {"slo.test.yml", "slo_long.test.yml", "capacity_trend.test.yml"}
]


@pytest.mark.integration
@pytest.mark.parametrize("interval", OTHER_INTERVALS)
@pytest.mark.parametrize("path", AT_EVERY_INTERVAL, ids=lambda p: p.name)
def test_promtool_test_rules_at_other_intervals(path: Path, interval: str, tmp_path: Path) -> None:
    """The same cases, evaluated every 15 s and every 30 s: an alert quiet on a healthy
    fleet and firing on a fault at 1 m must be so at the other intervals too (a `for`, a
    rate window or an absent() can depend on how often rules run)."""
    doc = yaml.safe_load(path.read_text())
    doc["evaluation_interval"] = interval
    doc["rule_files"] = [str((path.parent / f).resolve()) for f in doc["rule_files"]]
    test = tmp_path / path.name
    test.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run(
        [binary("promtool"), "test", "rules", str(test)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.unit
def test_rules_reading_a_recorded_series_share_its_group() -> None:
    """Groups are evaluated concurrently; only rules within one group run in order. A rule
    that reads a recorded series from another group races it (values flip between runs)."""
    home: dict[str, str] = {}
    groups = [
        (g["name"], g["rules"]) for f in RULES for g in yaml.safe_load(f.read_text())["groups"]
    ]
    for name, rules in groups:
        for r in rules:
            if "record" in r:
                home[r["record"]] = name
    problems = []
    for name, rules in groups:
        for r in rules:
            for used in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+", r["expr"]):
                if used in home and home[used] != name:
                    problems.append(
                        f"{r.get('alert') or r.get('record')} in {name} reads "
                        f"{used} from {home[used]}"
                    )
    assert not problems, "\n".join(problems)


@pytest.mark.unit
def test_alert_conventions() -> None:
    problems = []
    for rule in alerting_rules():
        name = rule["alert"]
        labels = rule.get("labels", {})
        ann = rule.get("annotations", {})
        if labels.get("severity") not in SEVERITIES:
            problems.append(f"{name}: severity {labels.get('severity')!r}")
        if not ann.get("summary") or "{{" in ann["summary"]:
            problems.append(f"{name}: summary must be static text")
        if "{{" not in ann.get("description", ""):
            problems.append(f"{name}: description must be templated")
        url = ann.get("runbook_url", "")
        if not url.startswith(RUNBOOK_BASE):
            problems.append(f"{name}: runbook_url must start with {RUNBOOK_BASE}")
            continue
        book = RUNBOOKS / url.removeprefix(RUNBOOK_BASE)
        if not book.is_file():
            problems.append(f"{name}: runbook {book.name} missing")
            continue
        text = book.read_text()
        problems.extend(f"{name}: runbook lacks {s!r}" for s in SECTIONS if s not in text)
    assert not problems, "\n".join(problems)


@pytest.mark.unit
def test_every_alert_has_firing_and_quiet_tests() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for f in RULE_TESTS:
        for case in yaml.safe_load(f.read_text()).get("tests", []):
            # promtool's key is `alert_rule_test` (singular); a file using any other key
            # fails `promtool test rules` with "field ... not found".
            for at in case.get("alert_rule_test", []):
                (firing if at.get("exp_alerts") else quiet).add(at["alertname"])
    names = {r["alert"] for r in alerting_rules()}
    assert not names - firing, f"alerts never tested firing: {sorted(names - firing)}"
    # The Watchdog fires by design at every evaluation: it has no quiet case.
    quiet_needed = names - ALWAYS_FIRING
    assert not quiet_needed - quiet, (
        f"alerts never tested quiet/pending: {sorted(quiet_needed - quiet)}"
    )


# The alert catalog: names are an interface (routes, silences and dashboards use them), so
# every alert is listed, and one renamed or gone fails here.
CATALOG = (
    "DNSResolverDown",
    "DNSResolverLatencyHigh",
    "DNSResolverServfailHigh",
    "DNSResolverRestarted",
    "DNSResolverRestartLoop",
    "DNSResolverBackendFlapping",
    "DNSStubFailoverDelay",
    "DNSStubResolutionFailing",
    "DNSNicQueueImbalance",
    "DNSNicIrqAffinityCollapsed",
    "DNSBondDegraded",
    "DNSBondFailover",
    "DNSBondLinkFlapping",
    "DNSBondNoLinkMonitoring",
    "DNSCpuLatencyDrift",
    "DNSConsulDNSDown",
    "DNSConsulDNSMismatch",
    "DNSConsulNoLeader",
    "DNSConsulRaftDbLarge",
    "DNSFleetExporterDown",
    "DNSFleetCollectorFailing",
    "Watchdog",
    "DNSSiteDown",
    "DNSConsulAPIDown",
    "DNSBondLacpNotAggregating",
    # The ways the monitoring itself goes blind, and partial loss.
    "DNSResolverProbeFailuresHigh",
    "DNSResolverStatsUnreadable",
    "DNSResolverCanaryUnusable",
    "DNSFleetConfigReloadFailed",
    "DNSFleetEventLoopLag",
    "DNSFleetTargetsDropped",
    "DNSFleetSeriesVanished",
    "DNSFleetExportersAbsent",
    # Capacity headroom and trend, Kubernetes cluster DNS sizing.
    "DNSResolverCapacityHeadroomLow",
    "DNSResolverCapacityExhaustionNear",
    "DNSClusterDNSReplicasShort",
    # The SLOs' burn-rate alerts (generated from alerts/config.yml).
    "DNSAvailabilityBudgetBurn",
    "DNSLatencyBudgetBurn",
    # DNSSEC from the resolver's side, zone integrity.
    "DNSResolverNotValidating",
    "DNSResolverCertificateExpiring",
    "DNSZoneSignaturesExpiring",
    "DNSZoneSerialDrift",
    "DNSZoneDSMismatch",
    "DNSZoneNameserverFailing",
    # Passive insight from dnstap.
    "DNSRandomSubdomainAttack",
    "DNSFleetDnstapIngestDown",
    "DNSSearchExpansionShareHigh",
    "DNSClusterDomainLeak",
    # Cluster DNS as pods live it: conntrack under it, NodeLocal DNSCache.
    "DNSConntrackDropping",
    "DNSNodeLocalPodsFailing",
    "DNSNodeLocalDNSCacheDown",
    # The pods' own lookups, as their libc walks them.
    "DNSPodLookupsFailing",
    "DNSPodQueryAmplificationHigh",
)
# The host alerts live in alerts/rules/host.rules.yml, a file of their own.
HOST_ALERTS = {
    "DNSNicQueueImbalance",
    "DNSNicIrqAffinityCollapsed",
    "DNSBondDegraded",
    "DNSBondFailover",
    "DNSBondLinkFlapping",
    "DNSBondNoLinkMonitoring",
    "DNSCpuLatencyDrift",
    "DNSBondLacpNotAggregating",
}
HOST_RULES_MERGED = (ROOT / "alerts" / "rules" / "host.rules.yml").exists()
ALWAYS_FIRING = {"Watchdog"}
# absent() has no series to take `instance` or `site` from; cluster DNS sizing is cluster-wide.
UNSCOPED = {"Watchdog", "DNSFleetExportersAbsent", "DNSClusterDNSReplicasShort"}
# Alerts about a whole site carry `site` but no `instance`; the Watchdog carries neither.
SITE_SCOPED = {"DNSSiteDown", "DNSAvailabilityBudgetBurn", "DNSLatencyBudgetBurn"}


@pytest.mark.unit
@pytest.mark.parametrize("name", CATALOG)
def test_catalog_complete(name: str) -> None:
    names = {r["alert"] for r in alerting_rules()}
    if name in HOST_ALERTS and name not in names and not HOST_RULES_MERGED:
        pytest.xfail("no alerts/rules/host.rules.yml: the host alerts are not there")
    assert name in names


@pytest.mark.unit
def test_catalog_has_nothing_undocumented() -> None:
    names = {r["alert"] for r in alerting_rules()}
    assert names <= set(CATALOG), f"alerts missing from CATALOG: {sorted(names - set(CATALOG))}"


@pytest.mark.unit
def test_firing_alerts_carry_inhibition_labels() -> None:
    """Alertmanager's inhibitions match on `instance` and `site` (alerts/alertmanager.yml):
    every alert a unit test fires must carry both, non-empty."""
    problems: list[str] = []
    for f in RULE_TESTS:
        for case in yaml.safe_load(f.read_text()).get("tests", []):
            for at in case.get("alert_rule_test", []):
                for exp in at.get("exp_alerts") or []:
                    name = at["alertname"]
                    labels = exp.get("exp_labels", {})
                    need = (
                        ()
                        if name in UNSCOPED
                        else ("site",)
                        if name in SITE_SCOPED
                        else ("site", "instance")
                    )
                    problems.extend(
                        f"{f.name}: {name} fires without {k!r}" for k in need if not labels.get(k)
                    )
    assert not problems, "\n".join(problems)


@pytest.mark.unit
def test_readme_table_matches_rules() -> None:
    """alerts/README.md is the one place thresholds are documented: one row per alert
    rule (alert, summary, severity, for), in step with the rule files."""
    rows = set()
    for line in (ROOT / "alerts" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("[") and "](runbooks/" in cells[0]:
            name = cells[0][1 : cells[0].index("]")]
            rows.add((name, cells[1], cells[4].strip("`"), cells[5]))
    rules = {
        (r["alert"], r["annotations"]["summary"], str(r.get("for", "0s")), r["labels"]["severity"])
        for r in alerting_rules()
    }
    assert rules - rows == set(), f"rules missing from alerts/README.md: {sorted(rules - rows)}"
    extra = {r for r in rows - rules if HOST_RULES_MERGED or r[0] not in HOST_ALERTS}
    assert extra == set(), f"README rows matching no rule: {sorted(extra)}"


# ------------------------------------------------------------------------ paging policy

# Critical pages; it is allowed only for these: clients are hurt now or within the
# hour at a site (a fast burn of an SLO's error budget: the generated alerts' critical
# windows), no resolver of a site answers, or the monitoring itself is gone.
PAGE_WORTHY = {
    "DNSAvailabilityBudgetBurn": "fast burn",
    "DNSLatencyBudgetBurn": "fast burn",
    "DNSSiteDown": "site with no resolver answering",
    "DNSFleetExportersAbsent": "monitoring gone",
    "DNSFleetExporterDown": "monitoring of a site gone (no exporter of it answers)",
    "DNSFleetTargetsDropped": "monitoring of a site gone (no exporter of it probes)",
    # A zone every validating resolver fails now (DS), or within the day for
    # certain (signatures; the one alert paging ahead of the hour, see alerts/README.md).
    "DNSZoneDSMismatch": "zone bogus for every validator now",
    "DNSZoneSignaturesExpiring": "zone bogus for every validator within a day",
    # Every pod of a node fails every lookup, which no SLO source sees.
    "DNSNodeLocalPodsFailing": "a node's pods fail every lookup now",
    # The pods of a node fail their lookups now, as their libc walks them.
    "DNSPodLookupsFailing": "pods failing their lookups now",
}


def policy_rows() -> dict[tuple[str, str], str]:
    """The paging policy table of alerts/README.md: (alert, severity) -> why."""
    text = (ROOT / "alerts" / "README.md").read_text()
    section = text.split("## Paging policy", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[str, str], str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("[") and "](runbooks/" in cells[0]:
            rows[(cells[0][1 : cells[0].index("]")], cells[1])] = cells[2]
    return rows


@pytest.mark.unit
def test_only_the_paging_policy_pages() -> None:
    """No alert is critical unless the policy says it may page; a burn-rate alert pages
    only on its fast windows (burn rate 6 or more, as the SRE workbook's page windows)."""
    problems = []
    for rule in alerting_rules():
        name, sev = rule["alert"], rule["labels"]["severity"]
        if sev != "critical":
            continue
        if name not in PAGE_WORTHY:
            problems.append(f"{name} is critical but outside the paging policy")
        if name.endswith("BudgetBurn") and rule["labels"].get("long") not in ("1h", "6h"):
            problems.append(f"{name} pages on a slow window {rule['labels'].get('long')}")
    assert not problems, "\n".join(problems)
    burns = [r for r in alerting_rules() if r["alert"].endswith("BudgetBurn")]
    assert {r["labels"]["severity"] for r in burns} == {"critical", "warning"}


@pytest.mark.unit
def test_paging_policy_table_matches_the_rules() -> None:
    """alerts/README.md's paging policy table has one row per alert and severity, each with
    its reason, and no row for what no rule has."""
    rows = policy_rows()
    rules = {(r["alert"], r["labels"]["severity"]) for r in alerting_rules()}
    assert rules - set(rows) == set(), f"missing from the policy table: {sorted(rules - set(rows))}"
    assert set(rows) - rules == set(), f"policy rows without a rule: {sorted(set(rows) - rules)}"
    assert all(len(why) > 20 for why in rows.values()), "every row says why"
    paging = {name for name, sev in rows if sev == "critical"}
    assert paging <= set(PAGE_WORTHY), sorted(paging - set(PAGE_WORTHY))
