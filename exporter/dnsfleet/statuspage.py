"""The status page at ``/``: an incident view for someone paged at night.

It never probes. Each ``/metrics`` scrape leaves a :class:`Snapshot` of the families the page
shows (resolver internals, canary and backend, stub failover, collector health); the page
renders the last one, the prober's per-target results, and the reload state, and says how
old they are. Restarts and cache resets are remembered as events by comparing one snapshot
with the next (:class:`History`), so the page can say *when* they happened, not only that a
counter moved. A failing target says since when it fails (the prober keeps that across
reloads that keep the target) and links the runbook of the alert it would raise, under the
same base URL as the alerting rules (``--web.runbook-base-url``; alerts/config.yml's
``runbook_base_url``). Everything is inline (no scripts, styles or fonts from elsewhere); the
page reloads itself with a meta refresh.
"""

from __future__ import annotations

import html
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dnsfleet import __version__
from dnsfleet.capacity import effective_capacity
from dnsfleet.exposition import Family
from dnsfleet.probes.ede import describe
from dnsfleet.probes.result import ProbeResult

if TYPE_CHECKING:
    from dnsfleet.app import Exporter

REFRESH_SECONDS = 15
EVENTS_PER_TARGET = 5
# Where the runbooks are: the default of alerts/config.yml's runbook_base_url (a test keeps
# the two equal); --web.runbook-base-url points it at your own copy or wiki.
RUNBOOK_BASE_URL = "https://github.com/dnsfleet/dnsfleet/blob/main/alerts/runbooks/"
# A watched resolv.conf whose modelled delay reaches this is degraded on the page; at 1 s
# DNSStubFailoverDelay opens a ticket.
DEGRADED_DELAY_SECONDS = 0.1
STUB_DELAY_ALERT_SECONDS = 1.0

# The families a snapshot keeps, by name; the page reads nothing else from a scrape.
# Names another part of the exporter may not emit (a collector that is off, a resolver
# family without the counter) are simply absent.
KEPT = frozenset(
    {
        "dnsfleet_resolver_stats_up",
        "dnsfleet_resolver_start_time_seconds",
        "dnsfleet_resolver_info",
        "dnsfleet_resolver_queries_total",
        "dnsfleet_resolver_cache_hits_total",
        "dnsfleet_resolver_cache_misses_total",
        "dnsfleet_resolver_capacity_qps",
        "dnsfleet_resolver_capacity_lower_bound",
        "dnsfleet_resolver_backend_info",
        "dnsfleet_resolver_cache_resets_total",
        "dnsfleet_resolver_last_cache_reset_timestamp_seconds",
        "dnsfleet_resolver_canary_cached",
        "dnsfleet_resolver_canary_usable",
        "dnsfleet_resolver_canary_unusable_reason",
        "dnsfleet_resolver_canary_ttl_seconds",
        "dnsfleet_stub_expected_delay_seconds",
        "dnsfleet_stub_resolution_failing",
        "dnsfleet_stub_nameservers",
        "dnsfleet_stub_nameserver_up",
        "dnsfleet_stub_resolv_conf_readable",
        "dnsfleet_collector_success",
        "dnsfleet_collector_duration_seconds",
    }
)

Labels = dict[str, str]


def parse_labels(text: str) -> Labels:
    """Pure: ``a="1",b="x\\"y"`` (as :func:`dnsfleet.exposition.labelset` renders) -> dict."""
    out: Labels = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.index("=", i)
        key = text[i:eq]
        j = eq + 2  # past ="
        buf: list[str] = []
        while text[j] != '"':
            if text[j] == "\\":
                j += 1
                buf.append("\n" if text[j] == "n" else text[j])
            else:
                buf.append(text[j])
            j += 1
        out[key] = "".join(buf)
        i = j + 2  # past ",
    return out


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float


@dataclass(frozen=True)
class Snapshot:
    """What one scrape left for the page: when, how long, and the kept families."""

    wall: float
    duration: float
    families: Mapping[str, tuple[Sample, ...]]

    @classmethod
    def of(cls, families: Iterable[object], *, wall: float, duration: float) -> Snapshot:
        kept: dict[str, list[Sample]] = {}
        for fam in families:
            if isinstance(fam, Family) and fam.name in KEPT:
                kept.setdefault(fam.name, []).extend(
                    Sample(parse_labels(lab), v) for suffix, lab, v in fam.samples if not suffix
                )
        return cls(wall, duration, {k: tuple(v) for k, v in kept.items()})

    def get(self, name: str) -> tuple[Sample, ...]:
        return tuple(self.families.get(name, ()))

    def by_target(self, name: str) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = {}
        for s in self.get(name):
            out.setdefault(s.labels.get("target", ""), []).append(s)
        return out


@dataclass(frozen=True)
class Event:
    wall: float
    what: str


@dataclass
class History:
    """Restarts and cache resets per target, found by comparing consecutive snapshots."""

    events: dict[str, deque[Event]] = field(default_factory=dict)
    qps: dict[str, float] = field(default_factory=dict)
    hit_ratio: dict[str, float] = field(default_factory=dict)
    previous: Snapshot | None = None

    def update(self, snap: Snapshot, targets: Iterable[str]) -> None:
        prev = self.previous
        if prev is not None:
            self._compare(prev, snap)
        self.previous = snap
        keep = set(targets)
        for gone in [t for t in self.events if t not in keep]:
            del self.events[gone]
        for gone in [t for t in self.qps if t not in keep]:
            del self.qps[gone]
        for gone in [t for t in self.hit_ratio if t not in keep]:
            del self.hit_ratio[gone]

    def _compare(self, prev: Snapshot, snap: Snapshot) -> None:
        before = {
            t: s[0].value for t, s in prev.by_target("dnsfleet_resolver_start_time_seconds").items()
        }
        for t, samples in snap.by_target("dnsfleet_resolver_start_time_seconds").items():
            old = before.get(t)
            if old is not None and samples[0].value != old:
                self._add(t, Event(samples[0].value, "restarted (start time changed)"))
        resets_before = {
            (s.labels.get("target", ""), s.labels.get("module", "")): s.value
            for s in prev.get("dnsfleet_resolver_cache_resets_total")
        }
        last_reset = {
            (s.labels.get("target", ""), s.labels.get("module", "")): s.value
            for s in snap.get("dnsfleet_resolver_last_cache_reset_timestamp_seconds")
        }
        for s in snap.get("dnsfleet_resolver_cache_resets_total"):
            key = (s.labels.get("target", ""), s.labels.get("module", ""))
            old = resets_before.get(key)
            if old is not None and s.value > old:
                self._add(
                    key[0],
                    Event(
                        last_reset.get(key, snap.wall),
                        f"cache reset seen by the canary (module {key[1]})",
                    ),
                )
        queries_before = {
            t: s[0].value for t, s in prev.by_target("dnsfleet_resolver_queries_total").items()
        }
        dt = snap.wall - prev.wall
        for t, samples in snap.by_target("dnsfleet_resolver_queries_total").items():
            old = queries_before.get(t)
            if old is not None and dt > 0 and samples[0].value >= old:
                self.qps[t] = (samples[0].value - old) / dt
            else:
                self.qps.pop(t, None)  # a counter reset: no rate across it

        # Cache-hit ratio between the two scrapes, as target:..._cache_hit:ratio_rate5m
        # computes it (hits / (hits + misses)); absent without traffic or across a reset.
        def delta(name: str) -> dict[str, float]:
            old = {t: s[0].value for t, s in prev.by_target(name).items()}
            return {
                t: s[0].value - old[t]
                for t, s in snap.by_target(name).items()
                if t in old and s[0].value >= old[t]
            }

        hits, misses = (
            delta("dnsfleet_resolver_cache_hits_total"),
            delta("dnsfleet_resolver_cache_misses_total"),
        )
        self.hit_ratio = {
            t: hits[t] / (hits[t] + misses[t])
            for t in hits
            if t in misses and hits[t] + misses[t] > 0
        }

    def _add(self, target: str, event: Event) -> None:
        q = self.events.setdefault(target, deque(maxlen=EVENTS_PER_TARGET))
        q.append(event)


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


# Issue 23: failures that raise DNSResolverNotValidating rather than DNSResolverDown.
NOT_VALIDATING_REASONS = frozenset({"not_validated", "validation_disabled"})


def ede_note(r: ProbeResult) -> str:
    """Pure: `` (EDE 7 Signature Expired: text)`` for an answer with Extended DNS Errors."""
    resp = r.response
    if resp is None or not resp.ede:
        return ""
    codes = ", ".join(describe(c) for c in resp.ede)
    return f" (EDE {codes}{': ' + resp.ede_text if resp.ede_text else ''})"


def failing_alert(site: str | None, site_failing: bool) -> str:
    """Pure: the alert a failing target raises: DNSSiteDown when it has a site and no
    target of that site answered its last probe, DNSResolverDown otherwise."""
    return "DNSSiteDown" if site and site_failing else "DNSResolverDown"


def render(exp: Exporter, *, metrics_path: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    e = html.escape
    snap = exp.last_snapshot
    hist = exp.status_history
    cfg = exp.config
    parts: list[str] = []

    # Reload state and the age of what is shown: the first things to trust or not.
    rs = exp.reload_status
    if rs.successful:
        parts.append(
            f'<p class="banner ok" id="reload">Configuration {e(cfg.source)} loaded '
            f"{ago(now - rs.timestamp)} ago.</p>"
        )
    else:
        parts.append(
            f'<p class="banner bad" id="reload">Last reload FAILED '
            f"{ago(now - rs.failed_at)} ago; still running the configuration loaded "
            f"{ago(now - rs.timestamp)} ago. Error: <code>{e(rs.error)}</code></p>"
        )
    if snap is None:
        parts.append(
            '<p class="banner warn" id="age">No scrape yet: this page shows what the '
            f"last <code>{e(metrics_path)}</code> scrape found, and it never probes "
            "by itself.</p>"
        )
    else:
        age = now - snap.wall
        stale = age > 5 * 60
        parts.append(
            f'<p class="banner {"warn" if stale else "ok"}" id="age">Last scrape '
            f"<b>{ago(age)} ago</b> (took {snap.duration:.2f}s)"
            + (": is Prometheus still scraping this exporter?" if stale else "")
            + "</p>"
        )

    states = list(exp.prober.states.values())
    failing = [st for st in states if st.last is not None and not st.last.success]
    delays = snap.get("dnsfleet_stub_expected_delay_seconds") if snap else ()
    stub_failing = {
        s.labels.get("resolv_conf")
        for s in (snap.get("dnsfleet_stub_resolution_failing") if snap else ())
        if s.value == 1
    }
    degraded = {
        s.labels.get("resolv_conf") for s in delays if s.value >= DEGRADED_DELAY_SECONDS
    } - stub_failing
    collectors = snap.get("dnsfleet_collector_success") if snap else ()
    bad_collectors = [s for s in collectors if s.value != 1]
    summary = [
        f"{len(states)} targets",
        _span("bad" if failing else "ok", f"{len(failing)} failing"),
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
    parts.append(
        f'<p id="summary">{" &middot; ".join(summary)} &middot; '
        f'<a href="{e(metrics_path)}">metrics</a> &middot; '
        '<a href="/config">effective config</a></p>'
    )

    parts.append(_targets_table(exp, snap, hist, now))
    if snap is not None:
        parts.append(_stub_table(snap, runbooks=exp.runbook_base_url))
        parts.append(_collector_table(snap))

    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<meta name="viewport" content="width=device-width">
<title>dnsfleet{" - " + str(len(failing)) + " failing" if failing else ""}</title>
<style>{CSS}</style></head><body>
<h1>dnsfleet exporter {e(__version__)}</h1>
{"".join(parts)}
<p><small>Reloads every {REFRESH_SECONDS}s from the state the last scrape left; viewing it
sends no query to any resolver.</small></p>
</body></html>
"""


def _targets_table(exp: Exporter, snap: Snapshot | None, hist: History, now: float) -> str:
    e = html.escape

    def by(name: str) -> dict[str, list[Sample]]:
        return snap.by_target(name) if snap else {}

    stats_up = by("dnsfleet_resolver_stats_up")
    start = by("dnsfleet_resolver_start_time_seconds")
    info = by("dnsfleet_resolver_info")
    capacity = by("dnsfleet_resolver_capacity_qps")
    lower = by("dnsfleet_resolver_capacity_lower_bound")
    backend = {
        (s.labels.get("target"), s.labels.get("module")): s.labels.get("backend", "")
        for s in (snap.get("dnsfleet_resolver_backend_info") if snap else ())
    }
    usable = {
        (s.labels.get("target"), s.labels.get("module")): s.value
        for s in (snap.get("dnsfleet_resolver_canary_usable") if snap else ())
    }
    reason = {
        (s.labels.get("target"), s.labels.get("module")): s.labels.get("reason", "")
        for s in (snap.get("dnsfleet_resolver_canary_unusable_reason") if snap else ())
        if s.value == 1
    }
    cached = {
        (s.labels.get("target"), s.labels.get("module")): s.value
        for s in (snap.get("dnsfleet_resolver_canary_cached") if snap else ())
    }
    last_reset: dict[str, float] = {}
    for s in snap.get("dnsfleet_resolver_last_cache_reset_timestamp_seconds") if snap else ():
        tgt = s.labels.get("target", "")
        last_reset[tgt] = max(last_reset.get(tgt, 0.0), s.value)
    # A site fails when none of its targets answered its last probe (DNSSiteDown's rule).
    site_ok: dict[str, bool] = {}
    for st in exp.prober.states.values():
        site = dict(st.target.labels).get("site")
        if site and st.last is not None:
            site_ok[site] = site_ok.get(site, False) or st.last.success
    states = sorted(
        exp.prober.states.values(),
        key=lambda s: (s.last is None or s.last.success, s.target.address, s.target.module),
    )
    rows = []
    for st in states:
        t, r = st.target, st.last
        key = (t.address, t.module)
        labels = " ".join(f"{k}={v}" for k, v in t.labels)
        site = dict(t.labels).get("site")
        since = ""
        if r is None:
            result = '<td class="unk">not probed yet</td><td></td><td></td>'
        else:
            verdict = "OK" if r.success else f"FAIL: {r.reason.value if r.reason else '?'}"
            detail = r.rcode_text if r.success else (r.detail or r.rcode_text)
            detail += ede_note(r)  # issue 23: the Extended DNS Errors beside the reason
            runbook = ""
            if not r.success:
                alert = failing_alert(site, site is not None and not site_ok.get(site, True))
                if r.reason is not None and r.reason.value in NOT_VALIDATING_REASONS:
                    alert = "DNSResolverNotValidating"
                runbook = f"<br>runbook: {runbook_link(exp.runbook_base_url, alert)}"
                if st.failing_since is not None:
                    since = f'<span class="bad">since {e(when(st.failing_since, now))}</span>'
            result = (
                f'<td class="{"ok" if r.success else "bad"}">{e(verdict)}{runbook}</td>'
                f"<td>{r.duration * 1000:.1f} ms</td><td>{e(detail)}</td>"
            )
        probed = f"{ago(now - st.last_wall)} ago" if r is not None else ""
        # the resolver's own statistics
        if t.stats is None:
            stats = '<span class="unk">not configured</span>'
        elif t.address not in stats_up:
            stats = '<span class="unk">not read yet</span>'
        elif stats_up[t.address][0].value == 1:
            soft = info.get(t.address)
            sw = (
                f"{soft[0].labels.get('software', '')} {soft[0].labels.get('version', '')}"
                if soft
                else ""
            )
            up = start.get(t.address)
            since = f", up {ago(now - up[0].value)}" if up else ""
            stats = _span("ok", f"readable{': ' + sw.strip() if sw.strip() else ''}{since}")
        else:
            stats = _span("bad", "UNREADABLE (restarts seen only by the canary)")
        # the canary
        if key in usable:
            canary = (
                _span("ok", "usable")
                if usable[key] == 1
                else _span("warn", f"unusable: {reason.get(key, 'unknown')}")
            )
        elif key in cached:
            canary = (
                _span("ok", "cached")
                if cached[key] == 1
                else _span("warn", "authoritative: cannot see resets")
            )
        else:
            canary = '<span class="unk">none</span>'
        events = hist.events.get(t.address, ())
        ev = "<br>".join(f"{e(ev.what)} {ago(now - ev.wall)} ago" for ev in reversed(events))
        # The last restart (the process start the resolver states) and the last cache reset
        # the canary saw, whichever is known.
        last = []
        if t.address in start:
            last.append(f"restart {when(start[t.address][0].value, now)}")
        if t.address in last_reset:
            last.append(f"cache reset {when(last_reset[t.address], now)}")
        latest = "<br>".join(e(x) for x in last) or '<span class="unk">none seen</span>'
        headroom = _headroom(
            capacity.get(t.address, []),
            lower.get(t.address, []),
            hist.qps.get(t.address),
            hist.hit_ratio.get(t.address),
        )
        rows.append(
            f'<tr data-target="{e(t.address)}" data-module="{e(t.module)}">'
            f"<td>{e(t.address)}</td><td>{e(t.module)}</td><td>{e(labels)}</td>{result}"
            f"<td>{since}</td><td>{probed}</td><td>{e(backend.get(key, ''))}</td>"
            f"<td>{stats}</td><td>{canary}</td><td>{latest}</td><td>{ev}</td>"
            f"<td>{headroom}</td></tr>"
        )
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
    delays = snap.get("dnsfleet_stub_expected_delay_seconds")
    if not delays and not snap.get("dnsfleet_stub_resolv_conf_readable"):
        return ""
    failing = {
        (s.labels.get("resolv_conf"), s.labels.get("libc")): s.value
        for s in snap.get("dnsfleet_stub_resolution_failing")
    }
    total = {s.labels.get("resolv_conf"): s.value for s in snap.get("dnsfleet_stub_nameservers")}
    up: dict[str | None, float] = {}
    for s in snap.get("dnsfleet_stub_nameserver_up"):
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
    for s in snap.get("dnsfleet_stub_resolv_conf_readable"):
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
    durations = {
        s.labels.get("collector"): s.value for s in snap.get("dnsfleet_collector_duration_seconds")
    }
    rows = []
    for s in sorted(
        snap.get("dnsfleet_collector_success"),
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
