"""The paging scenarios, in promtool, at the evaluation intervals Prometheus is run with
(15 s, the compose stack's; 30 s; 1 m, Prometheus' default): counted SLIs give the same
verdict at each. Every scenario runs on alerts/rules (slo.rules.yml with probe.rules.yml).
The inputs are counters as the exporter exports them, sampled every minute, for four probes
a minute per resolver and module (15 s scrapes; an HA pair of Prometheus scraping at 30 s
sends as many).

- one lost probe on a single-resolver site, three days of history: nothing;
- 0.4 % of probes failing on both resolvers of a site at the same moments (a shared
  upstream fault) for 24 h: a ticket, no page;
- 0.7 % the same way for 6 h: a page, through the 6h/30m window;
- a 10-minute 100 % SERVFAIL burst in the resolvers' own counters: a page within 5 minutes;
- one resolver of two failing every probe for an hour: nothing (its clients fail over);
- a healthy validator with dnsfleet's `expect_bogus` check, no client traffic and 5 qps,
  its own SERVFAIL counter read a probe behind at every other scrape: nothing at all.

The same scenarios on Prometheus 3's promtool and on Sloth's rules are
test_slo_scenarios_engines.py (a module of its own, so the suite's processes share them).
promtool evaluates every rule it is given at every step: each run is given only the rules
whose results its checks can see (harness.rulegraph), a fifth of the time for the same verdicts.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from alerts import generate

from tests.harness import rulegraph
from tests.harness.tools import binary

pytestmark = pytest.mark.integration

RULES = generate.RULES
INTERVALS = ("15s", "30s", "1m")
PROBES_PER_MINUTE = 4
BURN = 'alertname=~"DNS.+BudgetBurn", alertstate="firing"'


@dataclass(frozen=True)
class Scenario:
    name: str
    minutes: int
    series: dict[str, str]
    # (PromQL, evaluation time, expected samples)
    checks: list[tuple[str, str, list[dict[str, Any]]]] = field(default_factory=list)


def quiet(severity: str, until: str, *, any_alert: bool = False) -> tuple[str, str, list[Any]]:
    """No alert of this severity (a burn, or with any_alert any alert) fired up to then."""
    sel = 'alertstate="firing"' if any_alert else BURN
    return (f'max_over_time(ALERTS{{{sel}, severity="{severity}"}}[{until}])', until, [])


def fires(severity: str, at: str) -> tuple[str, str, list[Any]]:
    return (f'max(ALERTS{{{BURN}, severity="{severity}"}})', at, [{"labels": "{}", "value": 1}])


def nothing(until: str) -> tuple[str, str, list[Any]]:
    return (f'max_over_time(ALERTS{{alertstate="firing"}}[{until}])', until, [])


def probe_series(
    site: str, target: str, module: str, failures: str | None, n: int
) -> dict[str, str]:
    """A target's attempts, and its timeouts as the exporter writes them: no series
    (``None``) before the first, born at 0 in the scrape of the first, then the count."""
    lab = f'instance="e1:9853",job="dnsfleet",site="{site}",target="{target}",module="{module}"'
    out = {f"dnsfleet_probe_attempts_total{{{lab}}}": f"0+{PROBES_PER_MINUTE}x{n}"}
    if failures is not None:
        out[f'dnsfleet_probe_failures_total{{{lab},reason="timeout"}}'] = failures
    return out


def lost_probe() -> Scenario:
    n = 3 * 1440 + 120
    return Scenario(
        "one lost probe on a single-resolver site, three days of history",
        n,
        probe_series("one", "10.8.0.1:53", "m", f"_x{3 * 1440} 0 1x118", n),
        [quiet("critical", f"{n}m"), quiet("warning", f"{n}m")],
    )


def shared(share: float, *, healthy: int, faulty: int) -> dict[str, str]:
    """Both resolvers of site `up` failing `share` of their probes from `healthy` minutes on
    (at least two: the series is born at 0 in the first failing minute's scrape)."""
    per = PROBES_PER_MINUTE * share
    n = healthy + faulty
    fail = f"_x{healthy} 0 {2 * per:g}+{per:g}x{faulty - 2}"
    out: dict[str, str] = {}
    for t in ("10.9.0.1:53", "10.9.0.2:53"):
        out |= probe_series("up", t, "m", fail, n)
    return out


def servfail_burst() -> Scenario:
    lab = 'instance="e1:9853",job="dnsfleet",site="sf",target="10.1.0.1:53"'
    return Scenario(
        "a 10-minute 100 % SERVFAIL burst",
        190,
        {
            f'dnsfleet_resolver_responses_total{{{lab},rcode="NOERROR"}}': (
                "0+600x120 72000x9 72600+600x59"
            ),
            f'dnsfleet_resolver_responses_total{{{lab},rcode="SERVFAIL"}}': (
                "0x120 600+600x9 6000x59"
            ),
            **probe_series("sf", "10.1.0.1:53", "m", None, 190),
        },
        [quiet("critical", "120m"), fires("critical", "125m")],
    )


def one_of_two_down() -> Scenario:
    return Scenario(
        "one resolver of two failing every probe for an hour",
        80,
        {
            **probe_series("two", "10.5.0.1:53", "m", None, 80),
            **probe_series("two", "10.5.0.2:53", "m", "_x10 0 8+4x58 240x10", 80),
        },
        [quiet("critical", "80m"), quiet("warning", "80m")],
    )


def canary(clients_per_minute: int) -> Scenario:
    """A validator probed by a plain module and an expect_bogus one (4 probes a minute
    each); the resolver's SERVFAIL counter and its dnstap stream hold the bogus probes'
    SERVFAILs, read one probe short at every other scrape (stats read while the probes
    are in flight)."""
    n = 180
    base = 'instance="e1:9853",job="dnsfleet",site="val",target="10.2.0.1:53"'
    ok = f"0+{PROBES_PER_MINUTE + clients_per_minute}x{n}"
    servfail = " ".join(str(PROBES_PER_MINUTE * i - i % 2) for i in range(n + 1))
    series = {
        f'dnsfleet_resolver_responses_total{{{base},rcode="NOERROR"}}': ok,
        f'dnsfleet_resolver_responses_total{{{base},rcode="SERVFAIL"}}': servfail,
        f'dnsfleet_dnstap_responses_total{{{base},rcode="NOERROR",qtype="A",transport="udp"}}': ok,
        f'dnsfleet_dnstap_responses_total{{{base},rcode="SERVFAIL",qtype="A",transport="udp"}}': (
            servfail
        ),
        f'dnsfleet_probe_bogus_queries_total{{{base},module="bogus"}}': (
            f"0+{PROBES_PER_MINUTE}x{n}"
        ),
    }
    for module, rcode in (("m", 0), ("bogus", 2)):
        lab = f'{base},module="{module}"'
        series |= probe_series("val", "10.2.0.1:53", module, None, n)
        series[f"dnsfleet_probe_dns_rcode{{{lab}}}"] = f"{rcode}x{n}"
        series[f"dnsfleet_probe_success{{{lab}}}"] = f"1x{n}"
        for le in ("0.005", "1.0", "+Inf"):
            series[f'dnsfleet_probe_latency_seconds_bucket{{{lab},le="{le}"}}'] = (
                f"0+{PROBES_PER_MINUTE}x{n}"
            )
        series[f"dnsfleet_probe_latency_seconds_count{{{lab}}}"] = f"0+{PROBES_PER_MINUTE}x{n}"
    return Scenario(
        f"a healthy validator's expect_bogus check, {clients_per_minute / 60:g} qps of clients",
        n,
        series,
        [nothing(f"{n}m")],
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "lost-probe": lost_probe,
    "shared-0.4%-24h": lambda: Scenario(
        "0.4 % on every resolver of a site at once for 24 h",
        1450,
        shared(0.004, healthy=10, faulty=1440),
        [quiet("critical", "1450m"), fires("warning", "1450m")],
    ),
    "shared-0.7%-6h": lambda: Scenario(
        "0.7 % on every resolver of a site at once for 6 h",
        720,
        shared(0.007, healthy=360, faulty=360),
        [quiet("critical", "600m"), fires("critical", "700m")],
    ),
    "servfail-burst": servfail_burst,
    "one-of-two-down": one_of_two_down,
    "canary-quiet": lambda: canary(0),
    "canary-5qps": lambda: canary(300),
}


def needed_rules(rule_files: list[Path], scenario: Scenario, tmp: Path) -> list[Path]:
    """The rules of rule_files whose results the scenario's checks can see, written to tmp
    (harness.rulegraph says why dropping the others changes no checked value)."""
    docs = [yaml.safe_load(p.read_text()) for p in rule_files]
    inputs = {s.split("{", 1)[0] for s in scenario.series}
    rulegraph.needed(docs, inputs, [expr for expr, _, _ in scenario.checks])
    out = []
    for i, (p, doc) in enumerate(zip(rule_files, docs, strict=True)):
        out.append(tmp / f"{i}-{p.name}")
        out[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def promtool_test(
    promtool: str, rule_files: list[Path], scenario: Scenario, interval: str, tmp: Path
) -> None:
    rules = needed_rules(rule_files, scenario, tmp)
    out = run_promtool(promtool, rules, scenario, interval, tmp)
    assert out.returncode == 0, f"{scenario.name} at {interval}:\n{out.stdout}{out.stderr}"


def run_promtool(
    promtool: str, rule_files: list[Path], scenario: Scenario, interval: str, tmp: Path
) -> subprocess.CompletedProcess[str]:
    doc = {
        "rule_files": [str(p) for p in rule_files],
        "evaluation_interval": interval,
        "tests": [
            {
                "name": scenario.name,
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in scenario.series.items()],
                "promql_expr_test": [
                    {"expr": e, "eval_time": t, "exp_samples": exp} for e, t, exp in scenario.checks
                ],
            }
        ],
    }
    path = tmp / "scenario.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return our_rules(tmp_path_factory)


def our_rules(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The generated SLO rules without the period's budget (720-point subqueries at every
    evaluation, which no alert reads: alerts/tests/slo.test.yml checks them), and the probe
    rules beside them: three days at 15 s evaluations stay within minutes."""
    doc = generate.slo_rules(generate.load_config(generate.CONFIG))
    period = generate.load_config(generate.CONFIG).period
    group = doc["groups"][0]
    group["rules"] = [
        r
        for r in group["rules"]
        if not any(k in r.get("record", "") for k in (period, "budget", "coverage"))
    ]
    path = tmp_path_factory.mktemp("ours") / generate.SLO_FILE
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return [path, RULES / "probe.rules.yml"]


# Three days of 15 s evaluations take promtool half a minute alone and several times that on
# a machine busy with the rest of the suite: the hang guard is promtool's own 900 s, not the
# suite's 300 s default, which cut the lost-probe scenario short under load.
@pytest.mark.timeout(960)
@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_dnsfleet_rules(name: str, interval: str, ours: list[Path], tmp_path: Path) -> None:
    promtool_test(binary("promtool"), ours, SCENARIOS[name](), interval, tmp_path)


def servfailing_canary() -> Scenario:
    """The quiet canary with its plain module's probes SERVFAILing: DNSResolverServfailHigh,
    a ticket of probe.rules.yml that only `nothing` reads, fires."""
    sc = canary(0)
    bad = {"dnsfleet_probe_success": "0x180", "dnsfleet_probe_dns_rcode": "2x180"}
    series = {
        s: bad.get(s.split("{", 1)[0], v) if 'module="m"' in s else v for s, v in sc.series.items()
    }
    return replace(sc, name="a validator SERVFAILing", series=series)


@pytest.mark.parametrize(
    "scenario",
    [SCENARIOS["servfail-burst"](), SCENARIOS["shared-0.7%-6h"](), servfailing_canary()],
    ids=lambda s: s.name,
)
def test_needed_rules_give_what_all_rules_give(
    scenario: Scenario, ours: list[Path], tmp_path: Path
) -> None:
    """Every check's expression at 12 times of the scenario, with an expectation no result
    meets, so that promtool prints what it got: the same from the needed rules as from all
    of them, pages and tickets included."""
    checks = [
        (re.sub(r"\[\d+m\]", f"[{m}m]", expr), f"{m}m", [{"labels": '{x="never"}', "value": 0}])
        for expr, _, _ in scenario.checks
        for m in range(scenario.minutes // 12, scenario.minutes + 1, scenario.minutes // 12)
    ]
    probe = replace(scenario, checks=checks)
    got = []
    for rules, sub in ((ours, "all"), (needed_rules(ours, probe, tmp_path), "needed")):
        (tmp_path / sub).mkdir()
        out = run_promtool(binary("promtool"), rules, probe, "1m", tmp_path / sub)
        assert out.returncode == 1 and "never" in out.stdout + out.stderr, out.stderr
        got.append((out.stdout + out.stderr).replace(str(tmp_path / sub), ""))
    assert got[0] == got[1]
    # promtool prints the expressions quoted (alertstate=\"firing\"), and what they gave
    # not: an alert fired.
    assert 'alertstate="firing"' in got[0]
