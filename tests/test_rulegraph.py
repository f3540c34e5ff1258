"""harness.rulegraph: which rules a promtool scenario's checks can see, on hand-made rule
files and on alerts/rules with the inputs of test_slo_scenarios' scenarios."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from alerts import generate

from tests.harness import rulegraph
from tests.test_slo_scenarios import RULES, SCENARIOS, fires, nothing, quiet

pytestmark = pytest.mark.unit


def test_reads_names_not_labels_functions_or_windows() -> None:
    r = rulegraph.reads(
        'sum by (site, target) (rate(a_total{rcode="SERVFAIL", le="1.0"}[5m] offset 1h))'
        " / on (site) group_left () max(b:ratio) without (sloth_window) > 0.5 * 2"
        ' unless on (site) max_over_time(ALERTS{alertname=~"X.+", severity!="page"}[30m:1m])'
    )
    assert r.names == {"a_total", "b:ratio", "ALERTS"}
    assert r.alerts == ((("alertname", "=~", "X.+"), ("severity", "!=", "page")),)
    assert not r.makes


@pytest.mark.parametrize(
    "expr",
    [
        "vector(0.999)",
        "x or vector(0)",
        "x - time() < 86400",
        "absent(up)",
        "0.5",
        "foo(x)",
        'x or sum({__name__=~"y_.*"})',
        'x or {job="a"}',
    ],
)
def test_a_rule_that_may_give_samples_from_nothing_is_kept_as_live(expr: str) -> None:
    assert rulegraph.reads(expr).makes


def test_bare_alerts_selects_every_alert() -> None:
    assert rulegraph.reads("count(ALERTS)").alerts == ((),)


def _names(docs: list[dict[str, Any]]) -> list[str]:
    return [
        f"{r.get('record') or r['alert']}/{r.get('labels', {}).get('severity', '')}"
        for d in docs
        for g in d["groups"]
        for r in g["rules"]
    ]


def test_keeps_what_the_checks_read_through_live_inputs_only() -> None:
    docs: list[dict[str, Any]] = [
        {
            "groups": [
                {"name": "a", "rules": [{"alert": "Late", "expr": "later:r > 1"}]},
                {
                    "name": "b",
                    "rules": [
                        {"record": "later:r", "expr": "sum(rate(in_total[5m]))"},
                        {"record": "dead:r", "expr": "sum(rate(absent_total[5m]))"},
                        {"record": "unread:r", "expr": "sum(rate(in_total[1h]))"},
                        {"record": "const:r", "expr": "dead:r or vector(0)"},
                        {"alert": "Dead", "expr": "dead:r > 0"},
                        {"alert": "Const", "expr": "const:r > 0", "labels": {"severity": "x"}},
                        {"alert": "Const", "expr": "const:r > 1", "labels": {"severity": "y"}},
                        {
                            "alert": "Const",
                            "expr": "const:r > 2",
                            "labels": {"severity": "{{ 1 }}"},
                        },
                        {"alert": "Guarded", "expr": 'later:r > 0 unless ALERTS{alertname="Late"}'},
                    ],
                },
            ]
        }
    ]
    checks = ['ALERTS{alertname=~"Const|Dead|Guarded", severity!="y"}']
    rulegraph.needed(docs, {"in_total"}, checks)
    # Dead and dead:r read only a series nothing writes (const:r is kept by its vector);
    # the check's matcher excludes Const/y, not the templated severity; no check reads
    # unread:r; Guarded's ALERTS selector reads Late.
    assert _names(docs) == ["Late/", "later:r/", "const:r/", "Const/x", "Const/{{ 1 }}", "Guarded/"]


def _label(rule: dict[str, Any], name: str) -> str:
    return str(rule.get("labels", {}).get(name, ""))


def _scenario_rules(name: str) -> list[str]:
    docs = [yaml.safe_load((RULES / f).read_text()) for f in (generate.SLO_FILE, "probe.rules.yml")]
    sc = SCENARIOS[name]()
    rulegraph.needed(docs, {s.split("{")[0] for s in sc.series}, [c[0] for c in sc.checks])
    return [
        f"{r.get('record') or r['alert']}/{_label(r, 'severity') or _label(r, 'source')}"
        for d in docs
        for g in d["groups"]
        for r in g["rules"]
    ]


def test_lost_probe_keeps_every_burn_alert_and_the_probe_slis() -> None:
    """Its checks read every burn alert, and its input feeds the probe SLI only."""
    windows = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
    alerts = ("DNSAvailabilityBudgetBurn", "DNSLatencyBudgetBurn")
    assert sorted(_scenario_rules("lost-probe")) == sorted(
        [f"site:dnsfleet_slo_errors:ratio_rate{w}/probe" for w in windows]
        + [f"{a}/{s}" for a in alerts for s in ("critical", "warning") for _ in range(2)]
    )


def test_a_page_check_keeps_the_page_windows_of_each_fed_sli() -> None:
    kept = _scenario_rules("servfail-burst")
    assert sorted(kept) == sorted(
        [
            f"site:dnsfleet_slo_errors:ratio_rate{w}/{s}"
            for w in ("5m", "30m", "1h", "6h")
            for s in ("probe", "resolver")
        ]
        + [f"{a}/critical" for a in ("DNSAvailabilityBudgetBurn", "DNSLatencyBudgetBurn")] * 2
    )


def test_nothing_keeps_every_alert_its_input_can_raise() -> None:
    kept = _scenario_rules("canary-quiet")
    assert {"DNSResolverDown/warning", "DNSResolverServfailHigh/warning"} <= set(kept)
    assert "target:dnsfleet_probe_servfail:bool/" in kept  # DNSResolverServfailHigh reads it
    assert "target:dnsfleet_probe_failures:ratio_rate10m/" not in kept  # no alert reads it
    assert "DNSFleetExporterDown/warning" not in kept  # reads `up`, which it has not


def test_check_helpers_read_alerts() -> None:
    for expr, _, _ in (quiet("critical", "1m"), fires("warning", "1m"), nothing("1m")):
        assert rulegraph.reads(expr).alerts


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("1-errors:ratio_rate5m", {"errors:ratio_rate5m"}),
        ("1-dnsfleet:slo:ratio > 0.5", {"dnsfleet:slo:ratio"}),
        ("2+hits_total*3", {"hits_total"}),
        ("x offset 1h30m > 1e-3 * 2.5E+2 + 5ms", {"x"}),
    ],
)
def test_a_number_ends_where_a_name_begins(expr: str, names: set[str]) -> None:
    """``1-errors`` is one minus a series: the number is not ``1-e`` (an exponent with no
    digits) nor ``1-d`` (a duration), which would leave the series' name cut short and the
    rule reading it dropped as dead."""
    assert rulegraph.reads(expr).names == names


def test_a_selector_without_a_name_keeps_every_rule_it_may_select() -> None:
    """A kept rule (or a check) reading ``{__name__=~...}`` may read any rule's series."""
    docs: list[dict[str, Any]] = [
        {
            "groups": [
                {
                    "name": "a",
                    "rules": [
                        {"record": "x:a", "expr": "sum(rate(in_total[5m]))"},
                        {"alert": "Some", "expr": "x:a > 1"},
                        {"record": "x:count", "expr": 'count({__name__=~"x:.*"})'},
                        {"alert": "Few", "expr": "x:count < 2"},
                    ],
                }
            ]
        }
    ]
    rulegraph.needed(docs, {"in_total"}, ['ALERTS{alertname="Few"}'])
    assert _names(docs) == ["x:a/", "Some/", "x:count/", "Few/"]
