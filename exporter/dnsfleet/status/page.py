"""The status page at ``/``: an incident view for someone paged at night.

It never probes. Each ``/metrics`` scrape leaves the facts the page shows (resolver
internals, canary and backend, stub failover, collector health: status.PageFacts, a typed
model; this module names no metric); the page renders a :class:`StatusView` that ``app``
builds: those facts, the prober's per-target results, and the reload state, and says how old
they are. Restarts and cache
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dnsfleet import __version__
from dnsfleet.capacity.model import choose_capacity
from dnsfleet.config import Config
from dnsfleet.escapes import escape
from dnsfleet.prober import TargetSnapshot
from dnsfleet.probes.ede import NOT_VALIDATING, ede_note
from dnsfleet.selfmetrics import ReloadStatus
from dnsfleet.status.facts import CanaryFacts, History, PageFacts, ResolverFacts, StubFacts

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
    targets: Sequence[TargetSnapshot]  # the prober's, copied when the view was built
    facts: PageFacts | None  # None until the first scrape
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


def _text(text: str) -> str:
    """Text from outside (configured labels, answers, error details) as HTML: control and
    bidi characters as visible escapes first, as every other output stream shows them (a
    U+202E in a label would otherwise reorder what the page displays), then HTML-escaped."""
    return html.escape(escape(text))


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
    return f'<span class="{cls}">{_text(text)}</span>'


def when(wall: float, now: float) -> str:
    """Pure: ``3m ago (2026-11-23 16:40:12 UTC)``."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wall))
    return f"{ago(now - wall)} ago ({stamp})"


def runbook_link(base: str, alert: str) -> str:
    """A link to the runbook of ``alert``, named after it, as the rules link it."""
    e = _text
    return f'<a class="runbook" href="{e(base + alert + ".md")}">{e(alert)}</a>'


def failing_alert(site: str | None, site_failing: bool) -> str:
    """Pure: the alert a failing target raises: DNSSiteDown when it has a site and no
    target of that site answered its last probe, DNSResolverDown otherwise."""
    return "DNSSiteDown" if site and site_failing else "DNSResolverDown"


def render(view: StatusView, *, metrics_path: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    e = _text
    facts = view.facts
    failing = sum(1 for st in view.targets if st.last is not None and not st.last.success)
    parts = [
        *_banners(view, metrics_path=metrics_path, now=now),
        _summary(view, failing, metrics_path=metrics_path),
        _targets_table(view, now),
    ]
    if facts is not None:
        parts.append(_stub_table(facts, runbooks=view.runbook_base_url))
        parts.append(_collector_table(facts))

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
    e = _text
    rs, snap = view.reload_status, view.facts
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
    e = _text
    facts = view.facts
    stubs = facts.stubs if facts else ()
    stub_failing = {s.resolv_conf for s in stubs if s.failing}
    degraded = {s.resolv_conf for s in stubs if s.delay >= DEGRADED_DELAY_SECONDS} - stub_failing
    collectors = facts.collectors if facts else ()
    bad_collectors = [c for c in collectors if not c.ok]
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


def _targets_table(view: StatusView, now: float) -> str:
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
    rows = [_target_row(st, view, site_ok=site_ok, now=now) for st in states]
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
    st: TargetSnapshot, view: StatusView, *, site_ok: dict[str, bool], now: float
) -> str:
    e = _text
    t, hist = st.target, view.history
    facts = view.facts
    resolver = facts.resolvers.get(t.address) if facts else None
    canary = facts.canaries.get((t.address, t.module)) if facts else None
    labels = " ".join(f"{k}={v}" for k, v in t.labels)
    result, since = _result_cells(st, view.runbook_base_url, site_ok, now)
    probed = f"{ago(now - st.last_wall)} ago" if st.last is not None else ""
    events = hist.events.get(t.address, ())
    ev = "<br>".join(f"{e(ev.what)} {ago(now - ev.wall)} ago" for ev in reversed(events))
    headroom = _headroom(
        resolver.capacity if resolver else {},
        resolver.lower_bound if resolver else frozenset(),
        hist.qps.get(t.address),
        hist.hit_ratio.get(t.address),
    )
    return (
        f'<tr data-target="{e(t.address)}" data-module="{e(t.module)}">'
        f"<td>{e(t.address)}</td><td>{e(t.module)}</td><td>{e(labels)}</td>{result}"
        f"<td>{since}</td><td>{probed}</td><td>{e(canary.backend if canary else '')}</td>"
        f"<td>{_stats_cell(st, resolver, now)}</td><td>{_canary_cell(canary)}</td>"
        f"<td>{_latest_cell(resolver, now)}</td><td>{ev}</td>"
        f"<td>{headroom}</td></tr>"
    )


def _result_cells(
    st: TargetSnapshot, runbooks: str, site_ok: dict[str, bool], now: float
) -> tuple[str, str]:
    """The result, latency and reason cells of a target; and since when it fails."""
    e = _text
    r = st.last
    if r is None:
        return '<td class="unk">not probed yet</td><td></td><td></td>', ""
    verdict = "OK" if r.success else f"FAIL: {r.reason.value if r.reason else '?'}"
    detail = (r.rcode_text if r.success else (r.detail or r.rcode_text)) + ede_note(r.response)
    runbook = since = ""
    if not r.success:
        site = dict(st.target.labels).get("site", "")
        alert = NOT_VALIDATING.get(str(r.reason)) or failing_alert(site, not site_ok.get(site, 1))
        runbook = f"<br>runbook: {runbook_link(runbooks, alert)}"
        if st.failing_since is not None:
            since = f'<span class="bad">since {e(when(st.failing_since, now))}</span>'
    result = (
        f'<td class="{"ok" if r.success else "bad"}">{e(verdict)}{runbook}</td>'
        f"<td>{r.duration * 1000:.1f} ms</td><td>{e(detail)}</td>"
    )
    return result, since


def _stats_cell(st: TargetSnapshot, resolver: ResolverFacts | None, now: float) -> str:
    """The resolver's own statistics: readable (software, uptime), unreadable, or not."""
    if st.target.stats is None:
        return '<span class="unk">not configured</span>'
    if resolver is None or resolver.stats_up is None:
        return '<span class="unk">not read yet</span>'
    if not resolver.stats_up:
        return _span("bad", "UNREADABLE (restarts seen only by the canary)")
    sw = resolver.software
    uptime = f", up {ago(now - resolver.started)}" if resolver.started is not None else ""
    return _span("ok", f"readable{': ' + sw if sw else ''}{uptime}")


def _canary_cell(canary: CanaryFacts | None) -> str:
    if canary is not None and canary.usable is not None:
        if canary.usable:
            return _span("ok", "usable")
        return _span("warn", f"unusable: {canary.unusable_reason}")
    if canary is not None and canary.cached is not None:
        if canary.cached:
            return _span("ok", "cached")
        return _span("warn", "authoritative: cannot see resets")
    return '<span class="unk">none</span>'


def _latest_cell(resolver: ResolverFacts | None, now: float) -> str:
    """The last restart the resolver states and cache reset the canary saw, if known."""
    last = []
    if resolver is not None and resolver.started is not None:
        last.append(f"restart {when(resolver.started, now)}")
    if resolver is not None and resolver.last_cache_reset is not None:
        last.append(f"cache reset {when(resolver.last_cache_reset, now)}")
    return "<br>".join(_text(x) for x in last) or '<span class="unk">none seen</span>'


def _headroom(
    by_kind: Mapping[str, float], bound: frozenset[str], qps: float | None, hit: float | None
) -> str:
    """The capacity cell: the figures by kind (``≥`` where only a lower bound), the one
    chosen as the recording rule chooses it (capacity.choose_capacity), and the headroom at
    the live rate."""
    chosen = choose_capacity(by_kind, hit)
    if chosen is None:
        return '<span class="unk">unknown</span>'
    eff, basis = chosen

    def fig(kind: str) -> str:
        return f"{kind} {'≥' if kind in bound else ''}{by_kind[kind]:.0f}"

    figures = ", ".join(fig(k) for k in ("declared", "hit", "miss") if k in by_kind) + " qps"
    if qps is None:
        return f"capacity {eff:.0f} qps ({_text(basis)}; {figures})"
    head = 1 - qps / eff
    return _span(
        "bad" if head < 0.25 else "ok",
        f"{head:.0%} ({qps:.0f} of {eff:.0f} qps, {basis}; {figures})",
    )


def _stub_table(facts: PageFacts, *, runbooks: str) -> str:
    if not facts.stub_watched:
        return ""
    rows = [_stub_row(stub, runbooks) for stub in facts.stubs]
    rows += [
        f"<tr><td>{_text(path)}</td><td></td>"
        f"<td>{_span('bad', 'UNREADABLE')}</td><td></td><td></td></tr>"
        for path in facts.unreadable_stubs
    ]
    return (
        "<h2>Clients (resolv.conf)</h2><p><small>Modelled extra delay a lookup suffers "
        "from the failed nameservers listed before a working one.</small></p>"
        '<table id="stub"><tr><th>resolv.conf</th><th>libc</th><th>modelled delay</th>'
        "<th>nameservers</th><th>clients</th></tr>\n" + "\n".join(rows) + "</table>"
    )


def _stub_row(stub: StubFacts, runbooks: str) -> str:
    e = _text
    delay = _span("bad" if stub.delay >= 1 else "ok", f"{stub.delay:.2f}s")
    # What its clients get: every lookup failing, every lookup waiting (degraded), or
    # answered at once; with the runbook of the alert it raises.
    if stub.failing:
        fails = (
            _span("bad", "ALL LOOKUPS FAIL")
            + " "
            + runbook_link(runbooks, "DNSStubResolutionFailing")
        )
    elif stub.delay >= DEGRADED_DELAY_SECONDS:
        fails = _span("warn", f"DEGRADED: +{stub.delay:.2f}s per lookup")
        if stub.delay >= STUB_DELAY_ALERT_SECONDS:
            fails += " " + runbook_link(runbooks, "DNSStubFailoverDelay")
    else:
        fails = _span("ok", "ok")
    servers = (
        f"{stub.answering:.0f} of {stub.nameservers:.0f} answer"
        if stub.nameservers is not None
        else ""
    )
    return (
        f"<tr><td>{e(stub.resolv_conf)}</td><td>{e(stub.libc)}</td>"
        f"<td>{delay}</td><td>{servers}</td><td>{fails}</td></tr>"
    )


def _collector_table(facts: PageFacts) -> str:
    e = _text
    rows = [
        f'<tr data-collector="{e(c.name)}"><td>{e(c.name)}</td><td>'
        + (_span("ok", "ok") if c.ok else _span("bad", "FAILING (see the log)"))
        + f"</td><td>{c.duration * 1000:.1f} ms</td></tr>"
        for c in facts.collectors
    ]
    return (
        '<h2>Collectors</h2><table id="collectors"><tr><th>collector</th><th>state</th>'
        "<th>took</th></tr>\n" + "\n".join(rows) + "</table>"
    )
