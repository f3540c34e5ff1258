"""Error budget: the SLOs of alerts/config.yml (windows, period and burn rates read from
there): budget left per site and SLI, burn rate per window, the error ratios, the burn
alerts firing."""

from __future__ import annotations

from alerts.generate import CONFIG as ALERTS_CONFIG
from alerts.generate import BurnRate, Config, load_config, seconds
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus

from dashboards.gen.vocabulary import Panel, base, query, single, tab, ts, variables, with_panels

SITE = 'site=~"$site"'
BURN = (
    "site:dnsfleet_slo_errors:ratio_rate{w}{{" + SITE + "}}"
    " / on (slo) group_left () (1 - dnsfleet:slo_objective:ratio)"
)


def error_budget() -> dash.Dashboard:
    cfg = load_config(ALERTS_CONFIG)
    d = base(
        "dnsfleet-error-budget",
        "dnsfleet / Error budget",
        f"The DNS service level objectives per site: how much of the {cfg.period} error "
        "budget is left, how fast each SLI burns it over each alerting window, and which "
        "burn-rate alerts fire (alerts/config.yml; docs/design.md, Service level "
        "objectives).",
    )
    d = variables(d).time("now-7d", "now")
    return with_panels(d, _budget_left(cfg), _burn_windows(cfg), _ratios_and_alerts(cfg))


def _budget(cfg: Config) -> str:
    # Shown once a day of the period has data: before, "not enough data", not a figure
    # that rests on a few hours.
    return (
        f"site:dnsfleet_slo_error_budget_remaining:ratio{{{SITE}}}"
        " and on (site, slo, source)"
        f" site:dnsfleet_slo_period_coverage:ratio{{{SITE}}} * {_secs(cfg.period)} >= 86400"
    )


def _rates(windows: list[str]) -> list[prometheus.Dataquery]:
    return [query(BURN.format(w=w), "{{site}} {{slo}}/{{source}} " + w) for w in windows]


def _pairs(rows: list[BurnRate]) -> str:
    return "; ".join(f"{b.burn_rate:g}x over {b.long} and {b.short}" for b in rows)


def _secs(window: str) -> int:
    return seconds(window, "window")


def _budget_left(cfg: Config) -> list[Panel]:
    """The budget left per site, SLO and source, and the burn alerts firing."""
    budget = _budget(cfg)
    return [
        tab(
            "Error budget left per site",
            f"1 - (bad share of the {cfg.period} period) / (1 - objective), per site, SLO "
            "and SLI source: 100% untouched, 0 spent, below 0 overspent. The "
            f"{cfg.budget_step} ratios are sampled every {cfg.budget_step} and summed "
            f"over the period, a {cfg.budget_step} without data spending nothing; "
            "empty (not enough data) until a day of the period has data.",
            "percentunit",
            query(budget, instant=True, fmt="table"),
            width=12,
        ).no_value("not enough data"),
        single(
            "Lowest budget left",
            "The least error budget any site has left, over every SLO and source "
            "(not enough data until a day of the period has data).",
            "percentunit",
            query(f"min({budget})"),
            width=6,
        ).no_value("not enough data"),
        single(
            "Burn alerts firing",
            "DNSAvailabilityBudgetBurn and DNSLatencyBudgetBurn firing now, pages and tickets.",
            "short",
            query(
                'count(ALERTS{alertname=~"DNS.+BudgetBurn", alertstate="firing", '
                f"{SITE}}}) or vector(0)"
            ),
            width=6,
        ),
        ts(
            "Error budget left over time",
            "The budget left per site, SLO and source over the time range, from the "
            "first day of data on.",
            "percentunit",
            query(budget, "{{site}} {{slo}}/{{source}}"),
            width=24,
        ).no_value("not enough data"),
    ]


def _burn_windows(cfg: Config) -> list[Panel]:
    """The burn rate over each window of the pages and of the tickets."""
    pages = [b for b in cfg.burn_rates if b.severity == "critical"]
    tickets = [b for b in cfg.burn_rates if b.severity != "critical"]
    return [
        ts(
            "Burn rate, page windows",
            "Error ratio over each window divided by the budget rate (1 - objective): "
            "1 spends the budget exactly over the period. Pages while both windows of a "
            f"pair are above its rate: {_pairs(pages)}.",
            "x",
            *_rates(sorted({w for b in pages for w in (b.long, b.short)}, key=_secs)),
        ),
        ts(
            "Burn rate, ticket windows",
            "As on the left, over the ticket windows: a ticket while both windows of a "
            f"pair are above its rate: {_pairs(tickets)}.",
            "x",
            *_rates(sorted({w for b in tickets for w in (b.long, b.short)}, key=_secs)),
        ),
    ]


def _ratios_and_alerts(cfg: Config) -> list[Panel]:
    """The error ratios per site and for the fleet; the burn alerts."""
    return [
        ts(
            "Bad events per SLI",
            "Share of bad events over 5 minutes per site, SLO and source: for "
            "availability, probe rounds no resolver of the site answered, SERVFAIL "
            "answers of its resolvers, resolv.conf files resolving nothing, failed "
            "Consul lookups; for latency, answers and modelled stub delays over the "
            "threshold.",
            "percentunit",
            query(
                f"site:dnsfleet_slo_errors:ratio_rate{cfg.windows()[0]}{{{SITE}}}",
                "{{site}} {{slo}}/{{source}}",
            ),
        ),
        ts(
            "Fleet burn rate",
            "The fleet (the mean of its sites) over the fastest page's long window.",
            "x",
            query(
                f"fleet:dnsfleet_slo_errors:ratio_rate{cfg.budget_step}"
                " / on (slo) group_left () (1 - dnsfleet:slo_objective:ratio)",
                "{{slo}}/{{source}}",
            ),
        ),
        tab(
            "Burn alerts",
            "The burn-rate alerts firing or pending, with their windows.",
            "short",
            query(f'ALERTS{{alertname=~"DNS.+BudgetBurn", {SITE}}}', instant=True, fmt="table"),
            width=24,
        ),
    ]
