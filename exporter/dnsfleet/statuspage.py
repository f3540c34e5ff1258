"""The status page at ``/``: an incident view for someone paged at night.

It never probes. Each ``/metrics`` scrape leaves a snapshot of the families the page
shows (resolver internals, canary and backend, stub failover, collector health; status.py);
the page renders a :class:`StatusView` that ``app`` builds: the last snapshot, the prober's
per-target results, and the reload state, and says how old they are. Restarts and cache
resets are remembered as events by comparing one snapshot with the next (status.History),
so the page can say *when* they happened, not only that a counter moved. A failing target
says since when it fails (the prober keeps that across reloads that keep the target) and
links the runbook of the alert it would raise, under the same base URL as the alerting
rules (``--web.runbook-base-url``; alerts/config.yml's ``runbook_base_url``). Everything is
inline (no scripts, styles or fonts from elsewhere); the page reloads itself with a meta
refresh.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dnsfleet import __version__
from dnsfleet.capacity import effective_capacity
from dnsfleet.config import Config
from dnsfleet.prober import TargetState
from dnsfleet.selfmetrics import ReloadStatus
from dnsfleet.status import History, Kept, Sample, Snapshot

REFRESH_SECONDS = 15
# Where the runbooks are: the default of alerts/config.yml's runbook_base_url (a test keeps
# the two equal); --web.runbook-base-url points it at your own copy or wiki.
RUNBOOK_BASE_URL = "https://github.com/dnsfleet/dnsfleet/blob/main/alerts/runbooks/"
# A watched resolv.conf whose modelled delay reaches this is degraded on the page; at 1 s
# DNSStubFailoverDelay opens a ticket.
DEGRADED_DELAY_SECONDS = 0.1
STUB_DELAY_ALERT_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class StatusView:
    """Everything the page renders, built by ``app.Exporter.status_view``."""

    config: Config
    reload_status: ReloadStatus
    targets: Sequence[TargetState]
    snapshot: Snapshot | None
    history: History
    runbook_base_url: str


# ----------------------------------------------------------------------------- rendering

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em; color: #1d1d1f; }
h1 { font-size: 1.4em; margin: 0 0 .3em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; } th { background: #f0f0f3; }
td, th { padding: 3px 9px; border-bottom: 1px solid #ddd; text-align: left;
  vertical-align: top; }
.ok { color: #176f2c; } .bad { color: #b00020; font-weight: bold; }
.warn { color: #9a5b00; font-weight: bold; } .unk { color: #777; }
.banner { padding: .5em .8em; margin: .6em 0; border-radius: 4px; }
.banner.bad { background: #fde8ea; } .banner.ok { background: #e7f5ea; font-weight: normal; }
.banner.warn { background: #fff3de; }
small { color: #555; } code { font-size: 95%; }
"""


def ago(seconds: float) -> str:
    """Pure: a duration for humans, ``42s``, ``7m``, ``3h``, ``2d``."""
    s = max(seconds, 0.0)
    if s < 90:
        return f"{s:.0f}s"
    if s < 90 * 60:
        return f"{s / 60:.0f}m"
    if s < 36 * 3600:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def _span(cls: str, text: str) -> str:
    return f'<span class="{cls}">{html.escape(text)}</span>'


def when(wall: float, now: float) -> str:
    """Pure: ``3m ago (2026-11-23 16:40:12 UTC)``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wall))
    return f"{ago(now - wall)} ago ({stamp})"


def runbook_link(base: str, alert: str) -> str:
    """A link to the runbook of ``alert``, named after it, as the rules link it."""
    e = html.escape
    return f'<a class="runbook" href="{e(base + alert + ".md")}">{e(alert)}</a>'


def failing_alert(site: str | None, site_failing: bool) -> str:
    """Pure: the alert a failing target raises: DNSSiteDown when it has a site and no
    target of that site answered its last probe, DNSResolverDown otherwise."""
    return "DNSSiteDown" if site and site_failing else "DNSResolverDown"


def render(view: StatusView, *, metrics_path: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    e = html.escape
    snap = view.snapshot
    failing = sum(1 for st in view.targets if st.last is not None and not st.last.success)
    parts = [
        *_banners(view, metrics_path=metrics_path, now=now),
        _summary(view, failing, metrics_path=metrics_path),
        _targets_table(view, snap, view.history, now),
    ]
    if snap is not None:
        parts.append(_stub_table(snap, runbooks=view.runbook_base_url))
        parts.append(_collector_table(snap))

    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<meta name="viewport" content="width=device-width">
<title>dnsfleet{" - " + str(failing) + " failing" if failing else ""}</title>
<style>{CSS}</style></head><body>
<h1>dnsfleet exporter {e(__version__)}</h1>
{"".join(parts)}
<p><small>Reloads every {REFRESH_SECONDS}s from the state the last scrape left; viewing it
sends no query to any resolver.</small></p>
</body></html>
"""


def _banners(view: StatusView, *, metrics_path: str, now: float) -> list[str]:
    """Reload state and the age of what is shown: the first things to trust or not."""
    e = html.escape
    rs, snap = view.reload_status, view.snapshot
    if rs.successful:
        reload = (
            f'<p class="banner ok" id="reload">Configuration {e(view.config.source)} loaded '
            f"{ago(now - rs.timestamp)} ago.</p>"
        )
    else:
        reload = (
            f'<p class="banner bad" id="reload">Last reload FAILED '
            f"{ago(now - rs.failed_at)} ago; still running the configuration loaded "
            f"{ago(now - rs.timestamp)} ago. Error: <code>{e(rs.error)}</code></p>"
        )
    if snap is None:
        return [
            reload,
            '<p class="banner warn" id="age">No scrape yet: this page shows what the '
            f"last <code>{e(metrics_path)}</code> scrape found, and it never probes "
            "by itself.</p>",
        ]
    age = now - snap.wall
    stale = age > 5 * 60
    return [
        reload,
        f'<p class="banner {"warn" if stale else "ok"}" id="age">Last scrape '
        f"<b>{ago(age)} ago</b> (took {snap.duration:.2f}s)"
        + (": is Prometheus still scraping this exporter?" if stale else "")
        + "</p>",
    ]


def _summary(view: StatusView, failing: int, *, metrics_path: str) -> str:
    e = html.escape
    snap = view.snapshot
    delays = snap.get(Kept.STUB_DELAY) if snap else ()
    stub_failing = {
        s.labels.get("resolv_conf")
        for s in (snap.get(Kept.STUB_FAILING) if snap else ())
        if s.value == 1
    }
    degraded = {
        s.labels.get("resolv_conf") for s in delays if s.value >= DEGRADED_DELAY_SECONDS
    } - stub_failing
    collectors = snap.get(Kept.COLLECTOR_SUCCESS) if snap else ()
    bad_collectors = [s for s in collectors if s.value != 1]
    summary = [
        f"{len(view.targets)} targets",
        _span("bad" if failing else "ok", f"{failing} failing"),
    ]
    if stub_failing:
        summary.append(_span("bad", f"{len(stub_failing)} resolv.conf failing"))
    if degraded:
        summary.append(_span("warn", f"{len(degraded)} resolv.conf degraded"))
    if collectors:
        summary.append(
            _span(
                "bad" if bad_collectors else "ok",
                f"{len(bad_collectors)} of {len(collectors)} collectors failing",
            )
        )
    return (
        f'<p id="summary">{" &middot; ".join(summary)} &middot; '
        f'<a href="{e(metrics_path)}">metrics</a> &middot; '
        '<a href="/config">effective config</a></p>'
    )


TargetModule = tuple[str | None, str | None]


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the last snapshot says of each target (by target, or by target and module)."""

    stats_up: dict[str, list[Sample]]
    start: dict[str, list[Sample]]
    info: dict[str, list[Sample]]
    capacity: dict[str, list[Sample]]
    lower: dict[str, list[Sample]]
    backend: dict[TargetModule, str]
    usable: dict[TargetModule, float]
    reason: dict[TargetModule, str]
    cached: dict[TargetModule, float]
    last_reset: dict[str, float]

    @classmethod
    def of(cls, snap: Snapshot | None) -> _Facts:
        def by(name: str) -> dict[str, list[Sample]]:
            return snap.by_target(name) if snap else {}

        def get(name: str) -> tuple[Sample, ...]:
            return snap.get(name) if snap else ()

        def key(s: Sample) -> TargetModule:
            return (s.labels.get("target"), s.labels.get("module"))

        last_reset: dict[str, float] = {}
        for s in get(Kept.LAST_CACHE_RESET):
            tgt = s.labels.get("target", "")
            last_reset[tgt] = max(last_reset.get(tgt, 0.0), s.value)
        return cls(
            stats_up=by(Kept.STATS_UP),
            start=by(Kept.START_TIME),
            info=by(Kept.INFO),
            capacity=by(Kept.CAPACITY),
            lower=by(Kept.CAPACITY_LOWER_BOUND),
            backend={key(s): s.labels.get("backend", "") for s in get(Kept.BACKEND)},
            usable={key(s): s.value for s in get(Kept.CANARY_USABLE)},
            reason={
                key(s): s.labels.get("reason", "")
                for s in get(Kept.CANARY_UNUSABLE_REASON)
                if s.value == 1
            },
            cached={key(s): s.value for s in get(Kept.CANARY_CACHED)},
            last_reset=last_reset,
        )


def _targets_table(view: StatusView, snap: Snapshot | None, hist: History, now: float) -> str:
    facts = _Facts.of(snap)
    # A site fails when none of its targets answered its last probe (DNSSiteDown's rule).
    site_ok: dict[str, bool] = {}
    for st in view.targets:
        site = dict(st.target.labels).get("site")
        if site and st.last is not None:
            site_ok[site] = site_ok.get(site, False) or st.last.success
    states = sorted(
        view.targets,
        key=lambda s: (s.last is None or s.last.success, s.target.address, s.target.module),
    )
    rows = [
        _target_row(st, view, facts=facts, hist=hist, site_ok=site_ok, now=now) for st in states
    ]
    body = "\n".join(rows) or '<tr><td colspan="14">No targets configured.</td></tr>'
    return (
        "<h2>Resolvers</h2><p><small>Failing targets first, with the runbook of the alert "
        "they raise.</small></p>"
        '<table id="targets"><tr><th>target</th><th>module</th><th>labels</th>'
        "<th>result</th><th>latency</th><th>rcode / reason</th><th>failing</th>"
        "<th>probed</th><th>backend</th><th>statistics</th><th>canary</th>"
        "<th>last restart / cache reset</th><th>restarts and cache resets seen</th>"
        "<th>capacity headroom</th></tr>\n"
        f"{body}</table>"
    )


def _target_row(
    st: TargetState,
    view: StatusView,
    *,
    facts: _Facts,
    hist: History,
    site_ok: dict[str, bool],
    now: float,
) -> str:
    e = html.escape
    t = st.target
    key = (t.address, t.module)
    labels = " ".join(f"{k}={v}" for k, v in t.labels)
    result, since = _result_cells(st, view.runbook_base_url, site_ok, now)
    probed = f"{ago(now - st.last_wall)} ago" if st.last is not None else ""
    events = hist.events.get(t.address, ())
    ev = "<br>".join(f"{e(ev.what)} {ago(now - ev.wall)} ago" for ev in reversed(events))
    headroom = _headroom(
        facts.capacity.get(t.address, []),
        facts.lower.get(t.address, []),
        hist.qps.get(t.address),
        hist.hit_ratio.get(t.address),
    )
    return (
        f'<tr data-target="{e(t.address)}" data-module="{e(t.module)}">'
        f"<td>{e(t.address)}</td><td>{e(t.module)}</td><td>{e(labels)}</td>{result}"
        f"<td>{since}</td><td>{probed}</td><td>{e(facts.backend.get(key, ''))}</td>"
        f"<td>{_stats_cell(st, facts, now)}</td><td>{_canary_cell(key, facts)}</td>"
        f"<td>{_latest_cell(t.address, facts, now)}</td><td>{ev}</td>"
        f"<td>{headroom}</td></tr>"
    )


def _result_cells(
    st: TargetState, runbooks: str, site_ok: dict[str, bool], now: float
) -> tuple[str, str]:
    """The result, latency and reason cells of a target; and since when it fails."""
    e = html.escape
    r = st.last
    if r is None:
        return '<td class="unk">not probed yet</td><td></td><td></td>', ""
    verdict = "OK" if r.success else f"FAIL: {r.reason.value if r.reason else '?'}"
    detail = r.rcode_text if r.success else (r.detail or r.rcode_text)
    runbook = since = ""
    if not r.success:
        site = dict(st.target.labels).get("site")
        alert = failing_alert(site, site is not None and not site_ok.get(site, True))
        runbook = f"<br>runbook: {runbook_link(runbooks, alert)}"
        if st.failing_since is not None:
            since = f'<span class="bad">since {e(when(st.failing_since, now))}</span>'
    result = (
        f'<td class="{"ok" if r.success else "bad"}">{e(verdict)}{runbook}</td>'
        f"<td>{r.duration * 1000:.1f} ms</td><td>{e(detail)}</td>"
    )
    return result, since


def _stats_cell(st: TargetState, facts: _Facts, now: float) -> str:
    """The resolver's own statistics: readable (software, uptime), unreadable, or not."""
    t = st.target
    if t.stats is None:
        return '<span class="unk">not configured</span>'
    if t.address not in facts.stats_up:
        return '<span class="unk">not read yet</span>'
    if facts.stats_up[t.address][0].value != 1:
        return _span("bad", "UNREADABLE (restarts seen only by the canary)")
    soft = facts.info.get(t.address)
    sw = f"{soft[0].labels.get('software', '')} {soft[0].labels.get('version', '')}" if soft else ""
    up = facts.start.get(t.address)
    uptime = f", up {ago(now - up[0].value)}" if up else ""
    return _span("ok", f"readable{': ' + sw.strip() if sw.strip() else ''}{uptime}")


def _canary_cell(key: TargetModule, facts: _Facts) -> str:
    if key in facts.usable:
        if facts.usable[key] == 1:
            return _span("ok", "usable")
        return _span("warn", f"unusable: {facts.reason.get(key, 'unknown')}")
    if key in facts.cached:
        if facts.cached[key] == 1:
            return _span("ok", "cached")
        return _span("warn", "authoritative: cannot see resets")
    return '<span class="unk">none</span>'


def _latest_cell(address: str, facts: _Facts, now: float) -> str:
    """The last restart (the process start the resolver states) and the last cache reset
    the canary saw, whichever is known."""
    last = []
    if address in facts.start:
        last.append(f"restart {when(facts.start[address][0].value, now)}")
    if address in facts.last_reset:
        last.append(f"cache reset {when(facts.last_reset[address], now)}")
    return "<br>".join(html.escape(x) for x in last) or '<span class="unk">none seen</span>'


def _headroom(
    caps: list[Sample], lower: list[Sample], qps: float | None, hit_ratio: float | None
) -> str:
    """The capacity cell, choosing the figure as the recording rule
    target:dnsfleet_resolver_capacity_effective:qps does: declared, else the hit/miss mix at
    the live cache-hit ratio, else the miss figure, else the (optimistic) hit figure."""
    by_kind = {s.labels.get("kind", ""): s.value for s in caps if s.value > 0}
    bound = {s.labels.get("kind", "") for s in lower if s.value == 1}
    if not by_kind:
        return '<span class="unk">unknown</span>'

    def fig(kind: str) -> str:
        return f"{kind} {'≥' if kind in bound else ''}{by_kind[kind]:.0f}"

    figures = ", ".join(fig(k) for k in ("declared", "hit", "miss") if k in by_kind) + " qps"
    if "declared" in by_kind:
        eff, basis = by_kind["declared"], "declared"
    elif "hit" in by_kind and "miss" in by_kind and hit_ratio is not None:
        eff = effective_capacity(hit_ratio, by_kind["hit"], by_kind["miss"])
        basis = f"mix at {hit_ratio:.0%} cache hits"
    elif "miss" in by_kind:
        eff, basis = by_kind["miss"], "miss figure: no live cache-hit ratio"
    else:
        eff, basis = by_kind["hit"], "hit figure only: optimistic, assumes every query cached"
    if qps is None:
        return f"capacity {eff:.0f} qps ({html.escape(basis)}; {figures})"
    head = 1 - qps / eff
    return _span(
        "bad" if head < 0.25 else "ok",
        f"{head:.0%} ({qps:.0f} of {eff:.0f} qps, {basis}; {figures})",
    )


def _stub_table(snap: Snapshot, *, runbooks: str) -> str:
    e = html.escape
    delays = snap.get(Kept.STUB_DELAY)
    if not delays and not snap.get(Kept.STUB_READABLE):
        return ""
    failing = {
        (s.labels.get("resolv_conf"), s.labels.get("libc")): s.value
        for s in snap.get(Kept.STUB_FAILING)
    }
    total = {s.labels.get("resolv_conf"): s.value for s in snap.get(Kept.STUB_NAMESERVERS)}
    up: dict[str | None, float] = {}
    for s in snap.get(Kept.STUB_NAMESERVER_UP):
        up[s.labels.get("resolv_conf")] = up.get(s.labels.get("resolv_conf"), 0) + s.value
    rows = []
    for s in sorted(delays, key=lambda s: (-s.value, s.labels.get("resolv_conf", ""))):
        path = s.labels.get("resolv_conf", "")
        delay = _span("bad" if s.value >= 1 else "ok", f"{s.value:.2f}s")
        # What its clients get: every lookup failing, every lookup waiting (degraded), or
        # answered at once; with the runbook of the alert it raises.
        if failing.get((path, s.labels.get("libc"))) == 1:
            fails = (
                _span("bad", "ALL LOOKUPS FAIL")
                + " "
                + runbook_link(runbooks, "DNSStubResolutionFailing")
            )
        elif s.value >= DEGRADED_DELAY_SECONDS:
            fails = _span("warn", f"DEGRADED: +{s.value:.2f}s per lookup")
            if s.value >= STUB_DELAY_ALERT_SECONDS:
                fails += " " + runbook_link(runbooks, "DNSStubFailoverDelay")
        else:
            fails = _span("ok", "ok")
        servers = f"{up.get(path, 0):.0f} of {total[path]:.0f} answer" if path in total else ""
        rows.append(
            f"<tr><td>{e(path)}</td><td>{e(s.labels.get('libc', ''))}</td>"
            f"<td>{delay}</td><td>{servers}</td><td>{fails}</td></tr>"
        )
    for s in snap.get(Kept.STUB_READABLE):
        if s.value == 0:
            rows.append(
                f"<tr><td>{e(s.labels.get('resolv_conf', ''))}</td><td></td>"
                f"<td>{_span('bad', 'UNREADABLE')}</td><td></td><td></td></tr>"
            )
    return (
        "<h2>Clients (resolv.conf)</h2><p><small>Modelled extra delay a lookup suffers "
        "from the failed nameservers listed before a working one.</small></p>"
        '<table id="stub"><tr><th>resolv.conf</th><th>libc</th><th>modelled delay</th>'
        "<th>nameservers</th><th>clients</th></tr>\n" + "\n".join(rows) + "</table>"
    )


def _collector_table(snap: Snapshot) -> str:
    e = html.escape
    durations = {s.labels.get("collector"): s.value for s in snap.get(Kept.COLLECTOR_DURATION)}
    rows = []
    for s in sorted(
        snap.get(Kept.COLLECTOR_SUCCESS),
        key=lambda s: (s.value == 1, s.labels.get("collector", "")),
    ):
        name = s.labels.get("collector", "")
        state = _span("ok", "ok") if s.value == 1 else _span("bad", "FAILING (see the log)")
        rows.append(
            f'<tr data-collector="{e(name)}"><td>{e(name)}</td><td>{state}</td>'
            f"<td>{durations.get(name, 0) * 1000:.1f} ms</td></tr>"
        )
    return (
        '<h2>Collectors</h2><table id="collectors"><tr><th>collector</th><th>state</th>'
        "<th>took</th></tr>\n" + "\n".join(rows) + "</table>"
    )
