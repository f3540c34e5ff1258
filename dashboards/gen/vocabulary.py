"""The words every dashboard is written in: the selections, a query, the four panel kinds,
the dashboard frame with its variables, and the restart annotations.

Every panel carries a title, a description and a unit and draws on the `datasource`
variable; every dashboard has the variables datasource, job, instance and site. Queries
select on `SEL` (raw series) or `REC` (recording rules, which aggregate `job` away).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig, VizLegendOptions
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job=~"$job", instance=~"$instance", site=~"$site"'
# Recording rules aggregate by (instance, site, target): no job label.
REC = 'instance=~"$instance", site=~"$site"'
RESOLVER = f'{SEL}, target=~"$target"'
RESOLVER_REC = f'{REC}, target=~"$target"'
RATE = "[$__rate_interval]"
TAGS = ["dnsfleet", "dns"]

Panel = Any  # the SDK's panel builders share no public base type


def query(
    expr: str, legend: str = "", *, instant: bool = False, fmt: str | None = None
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant()
    if fmt == "table":
        q = q.format(PromQueryFormat.TABLE)
    return q


def _common(
    panel: Panel,
    title: str,
    description: str,
    unit: str,
    *queries: prometheus.Dataquery,
    height: int = 8,
    width: int = 12,
) -> Panel:
    panel = (
        panel.title(title)
        .description(description)
        .unit(unit)
        .datasource(DS)
        .height(height)
        .span(width)
    )
    for i, q in enumerate(queries):
        panel = panel.with_target(q.ref_id(chr(ord("A") + i)))
    return panel


def ts(
    title: str,
    description: str,
    unit: str,
    *queries: prometheus.Dataquery,
    width: int = 12,
    min_val: float | None = None,
    max_val: float | None = None,
    stack: bool = False,
) -> Panel:
    p = timeseries.Panel().legend(
        VizLegendOptions()
        .show_legend(True)
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .calcs(["lastNotNull", "max"])
    )
    p = p.line_width(1).fill_opacity(10 if not stack else 40)
    if stack:
        p = p.stacking(StackingConfig().mode(common.StackingMode.NORMAL))
    if min_val is not None:
        p = p.min(min_val)
    if max_val is not None:
        p = p.max(max_val)
    return _common(p, title, description, unit, *queries, width=width)


def single(
    title: str, description: str, unit: str, q: prometheus.Dataquery, *, width: int = 6
) -> Panel:
    p = (
        stat.Panel()
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
    )
    return _common(p, title, description, unit, q, height=5, width=width)


def tab(
    title: str, description: str, unit: str, q: prometheus.Dataquery, *, width: int = 12
) -> Panel:
    return _common(table.Panel(), title, description, unit, q, width=width)


def heat(
    title: str, description: str, unit: str, q: prometheus.Dataquery, *, width: int = 24
) -> Panel:
    p = (
        heatmap.Panel()
        .calculate(False)
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.AUTO))
    )
    return _common(p, title, description, unit, q, width=width)


def with_panels(d: dash.Dashboard, *groups: Iterable[Panel]) -> dash.Dashboard:
    # The SDK lays each panel out after the one added before it: the order of the groups
    # and of the panels in them is the order on the grid.
    for group in groups:
        for panel in group:
            d = d.with_panel(panel)
    return d


def _var(name: str, label: str, q: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(q)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def variables(
    d: dash.Dashboard, *, target: bool = False, device: bool = False, agent: bool = False
) -> dash.Dashboard:
    d = d.with_variable(
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
    )
    d = d.with_variable(_var("job", "Job", "label_values(dnsfleet_build_info, job)"))
    d = d.with_variable(
        _var("instance", "Exporter", 'label_values(dnsfleet_build_info{job=~"$job"}, instance)')
    )
    d = d.with_variable(
        _var(
            "site",
            "Site",
            'label_values({__name__=~"dnsfleet_build_info|dnsfleet_probe_success", '
            'job=~"$job"}, site)',
        )
    )
    if target:
        d = d.with_variable(
            _var("target", "Resolver", f"label_values(dnsfleet_probe_success{{{SEL}}}, target)")
        )
    if device:
        d = d.with_variable(
            _var("device", "NIC", f"label_values(dnsfleet_nic_queues{{{SEL}}}, device)")
        )
    if agent:
        d = d.with_variable(
            _var("agent", "Consul agent", f"label_values(dnsfleet_consul_up{{{SEL}}}, agent)")
        )
    return d


def base(uid: str, title: str, description: str) -> dash.Dashboard:
    return (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
    )


def restart_annotations(d: dash.Dashboard, selector: str) -> dash.Dashboard:
    # The annotation is placed at the value (the restart time the resolver reports), not
    # at the scrape that noticed it: see ANNOTATION_EXTRA.
    return d.annotation(
        dash.AnnotationQuery()
        .name("Resolver restarts")
        .datasource(DS)
        .enable(True)
        .icon_color("red")
        .expr(f"max by (site, target) (dnsfleet_resolver_start_time_seconds{{{selector}}}) * 1000")
    ).annotation(
        dash.AnnotationQuery()
        .name("Cache resets")
        .datasource(DS)
        .enable(True)
        .icon_color("orange")
        .expr(
            "max by (site, target) (dnsfleet_resolver_last_cache_reset_"
            f"timestamp_seconds{{{selector}}}) * 1000"
        )
    )


# Fields of Grafana's Prometheus annotation query that the SDK's AnnotationQuery model does
# not carry: `useValueForTime` makes each distinct value (a restart time in ms) one
# annotation at that time, so the marker sits at the exact restart, not at the scrape that
# saw it.
ANNOTATION_EXTRA = {
    "Resolver restarts": {
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "{{target}} restarted",
        "tagKeys": "site,target",
    },
    "Cache resets": {
        "useValueForTime": True,
        "step": "1m",
        "titleFormat": "{{target}} cache reset",
        "tagKeys": "site,target",
    },
}
