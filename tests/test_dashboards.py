"""Dashboards: the committed JSON is what dashboards/generate.py produces now; every
dashboard has the datasource/job/instance/site variables; every panel a title, a
description and a unit; every query is valid PromQL (promtool, offline). tests/
test_fullstack.py runs every query against a real Prometheus."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards import generate

from tests.harness.tools import binary

JSON_DIR = generate.OUT


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((JSON_DIR / f"{name}.json").read_text())
    return doc


@pytest.mark.unit
def test_committed_json_is_fresh() -> None:
    stale = [
        n
        for n in generate.DASHBOARDS
        if not (JSON_DIR / f"{n}.json").exists()
        or (JSON_DIR / f"{n}.json").read_text() != generate.render(n)
    ]
    assert not stale, f"regenerate with `.venv/bin/python -m dashboards.generate`: {stale}"
    on_disk = {p.stem for p in JSON_DIR.glob("*.json")}
    assert on_disk == set(generate.DASHBOARDS), "JSON files without a generator"


@pytest.mark.unit
def test_check_mode_detects_drift(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for n in generate.DASHBOARDS:
        (tmp_path / f"{n}.json").write_text((JSON_DIR / f"{n}.json").read_text())
    monkeypatch.setattr(generate, "OUT", tmp_path)
    assert generate.main(["--check"]) == 0
    doctored = load("fleet-overview")
    doctored["panels"][0]["title"] = "edited by hand"
    (tmp_path / "fleet-overview.json").write_text(json.dumps(doctored, indent=2))
    assert generate.main(["--check"]) == 1


@pytest.mark.unit
@pytest.mark.parametrize("name", list(generate.DASHBOARDS))
def test_variables_and_panels(name: str) -> None:
    doc = load(name)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert {"datasource", "job", "instance", "site"} <= set(variables)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    problems = []
    for p in doc["panels"]:
        title = p.get("title", "")
        if not title:
            problems.append(f"panel without title: {p.get('type')}")
        if not p.get("description"):
            problems.append(f"{title}: no description")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            problems.append(f"{title}: no unit")
        if not p.get("targets"):
            problems.append(f"{title}: no query")
        if p.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"{title}: not on the datasource variable")
        for t in p.get("targets", []):
            expr = t["expr"]
            # Each query follows the selection (recording rules have no job label); the
            # cluster-wide series of Kubernetes cluster DNS belong to no site or exporter,
            # the SLOs' site:/fleet: series to no exporter (fleet: to no site either).
            fleet_wide = "cluster:dnsfleet_" in expr or "fleet:dnsfleet_" in expr
            per_site = "dnsfleet_" in expr and not fleet_wide
            per_exporter = per_site and "site:dnsfleet_" not in expr
            if per_site and '"$site"' not in expr:
                problems.append(f"{title}: query ignores $site: {expr}")
            if per_exporter and '"$instance"' not in expr:
                problems.append(f"{title}: query ignores $instance: {expr}")
    assert not problems, "\n".join(problems)
    assert len({p["title"] for p in doc["panels"]}) == len(doc["panels"]), "duplicate titles"


@pytest.mark.unit
def test_required_panels_exist() -> None:
    titles = {n: {p["title"] for p in load(n)["panels"]} for n in generate.DASHBOARDS}
    assert {
        "Probe success per resolver",
        "Probe latency p90 per resolver",
        "Stub failover delay per host",
        "Pod lookups failing",
        "Queries per pod lookup",
    } <= titles["fleet-overview"]
    assert {
        "Queries per second",
        "Cache-hit ratio",
        "SERVFAIL share",
        "Backend identity",
        "Canary TTL",
    } <= titles["resolver-detail"]
    assert {
        "NIC interrupts per CPU",
        "Interrupt imbalance",
        "CPUs serving NIC interrupts",
        "CPU wake-up latency",
        "Scaling governor",
        "Bond slaves up",
    } <= titles["host-latency"]
    assert {
        "QPS against capacity",
        "Headroom",
        "Days to capacity",
        "Cache-hit trend",
        "Load and capacity per site",
        "Lowest headroom per site",
        "Cluster DNS replicas",
    } <= titles["capacity-trend"]
    assert {
        "Error budget left per site",
        "Burn rate, page windows",
        "Burn rate, ticket windows",
        "Bad events per SLI",
    } <= titles["error-budget"]
    burn = [p for p in load("error-budget")["panels"] if p["title"] == "Burn rate, page windows"]
    windows = {t["expr"].split("ratio_rate")[1].split("{")[0] for t in burn[0]["targets"]}
    assert windows == {"1h", "5m", "6h", "30m"}  # the page windows of alerts/config.yml
    heat = [p for p in load("host-latency")["panels"] if p["title"] == "NIC interrupts per CPU"]
    assert heat[0]["type"] == "heatmap"
    days = [p for p in load("capacity-trend")["panels"] if p["title"] == "Days to capacity"]
    assert "target:dnsfleet_resolver_capacity_exhaustion:days" in days[0]["targets"][0]["expr"]
    # Restart markers sit at the restart time the resolver reports (its value), not at the
    # scrape that saw it.
    anns = {a["name"]: a for a in load("fleet-overview")["annotations"]["list"]}
    assert anns["Resolver restarts"]["useValueForTime"] is True
    assert "dnsfleet_resolver_start_time_seconds" in anns["Resolver restarts"]["expr"]


@pytest.mark.integration
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query (variables on "All") as a recording rule: a syntax
    error anywhere fails here, without a server."""
    rules = []
    for name in generate.DASHBOARDS:
        for i, (_, expr) in enumerate(generate.panel_queries(load(name))):
            rules.append(
                {
                    "record": f"dashboard:check_{name.replace('-', '_')}:{i}",
                    "expr": generate.concrete(expr),
                }
            )
    f = tmp_path / "dashboard-queries.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    out = subprocess.run(
        [binary("promtool"), "check", "rules", str(f)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(rules)} rules found" in out.stdout
