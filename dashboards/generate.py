"""Grafana dashboards for dnsfleet, generated with grafana-foundation-sdk (pinned in
pyproject.toml) and committed as JSON under dashboards/json/.

    .venv/bin/python -m dashboards.generate          # rewrite dashboards/json/*.json
    .venv/bin/python -m dashboards.generate --check  # exit 1 if the committed JSON is stale

tests/test_dashboards.py runs the check; tests/test_fullstack.py runs every query against
a real Prometheus fed by the real exporter.

Each dashboard is a module of dashboards/gen/ (listed in DASHBOARDS below), written in the
panel and query vocabulary of dashboards/gen/vocabulary.py. Every dashboard has the
variables datasource, job, instance and site; every panel a title, a description and a
unit. Queries select on `job=~"$job", instance=~"$instance", site=~"$site"` (raw series)
or `instance=~"$instance", site=~"$site"` (recording rules, which aggregate `job` away).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from dashboards.gen.budget import error_budget
from dashboards.gen.capacity import capacity_trend
from dashboards.gen.consul import consul_dns
from dashboards.gen.dnssec import dnssec_zones
from dashboards.gen.fleet import fleet_overview
from dashboards.gen.host import host_latency
from dashboards.gen.resolver import resolver_detail
from dashboards.gen.vocabulary import ANNOTATION_EXTRA

OUT = Path(__file__).resolve().parent / "json"

DASHBOARDS: dict[str, Callable[[], dash.Dashboard]] = {
    "fleet-overview": fleet_overview,
    "resolver-detail": resolver_detail,
    "host-latency": host_latency,
    "consul-dns": consul_dns,
    "capacity-trend": capacity_trend,
    "error-budget": error_budget,
    "dnssec-zones": dnssec_zones,
}


def render(name: str) -> str:
    doc = json.loads(json.dumps(DASHBOARDS[name]().build(), cls=JSONEncoder))
    for ann in doc.get("annotations", {}).get("list", []):
        ann.update(ANNOTATION_EXTRA.get(ann.get("name", ""), {}))
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# ------------------------------------------------------------------------- for the tests


def panel_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target of a rendered dashboard, and
    ("annotation: NAME", expr) of its annotation queries."""
    out = [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
    out.extend(
        (f"annotation: {a['name']}", a["expr"])
        for a in doc.get("annotations", {}).get("list", [])
        if a.get("expr")
    )
    return out


def concrete(expr: str, *, rate_interval: str = "1m") -> str:
    """The query as Grafana sends it with every variable on "All" (`.*`)."""
    for var in ("job", "instance", "site", "target", "device", "agent"):
        expr = expr.replace(f'=~"${var}"', '=~".*"')
    return expr.replace("$__rate_interval", rate_interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--check", action="store_true", help="compare with the committed JSON instead of writing it"
    )
    args = p.parse_args(argv)
    stale = []
    OUT.mkdir(exist_ok=True)
    for name in DASHBOARDS:
        path = OUT / f"{name}.json"
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run `python -m dashboards.generate`): {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
