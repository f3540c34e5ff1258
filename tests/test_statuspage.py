"""The status page at ``/`` as an incident view: pure pieces (label parsing, event history)
and the real page in headless Chromium, served by a real exporter that probes a real
unbound (recursing to BIND for its canary) and a closed port, with a resolv.conf whose only
nameserver refuses. The DOM is asserted, a screenshot is taken, and the page is shown to
send no query to any resolver: unbound's own query counter does not move while it is
viewed, and the exporter's probe counter moves by one scrape's worth per scrape only."""

from __future__ import annotations

import html
import html.parser
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from dnsfleet.collectors.base import CollectorRun, Findings
from dnsfleet.collectors.resolver import ResolverReading
from dnsfleet.collectors.resolver_capacity import CapacityFigure
from dnsfleet.config import Config, parse
from dnsfleet.parsers.resolver import ResolverStats
from dnsfleet.prober import Prober
from dnsfleet.probes import Reason, failed
from dnsfleet.probes.result import ProbeResult
from dnsfleet.restarts import CanaryReading
from dnsfleet.selfmetrics import ReloadStatus
from dnsfleet.status.facts import History, PageFacts, ResolverFacts
from dnsfleet.status.page import (
    RUNBOOK_BASE_URL,
    StatusView,
    _headroom,
    ago,
    failing_alert,
    render,
    when,
)
from tests.harness.exporter import ExporterProcess
from tests.harness.metrics import value
from tests.harness.servers import Blackhole, Named, Unbound
from tests.harness.tools import binary
from tests.test_fullstack import spare_loopback_pair

# ------------------------------------------------------------------------------ pure


@pytest.mark.unit
def test_ago() -> None:
    assert [ago(s) for s in (-3, 5, 89, 600, 7200, 200000)] == [
        "0s",
        "5s",
        "89s",
        "10m",
        "2h",
        "2d",
    ]


@pytest.mark.unit
def test_when_and_the_alert_a_failing_target_raises() -> None:
    assert when(1_800_000_000, 1_800_000_180) == "3m ago (2027-01-15 08:00:00 UTC)"
    assert failing_alert("ams", site_failing=True) == "DNSSiteDown"
    assert failing_alert("ams", site_failing=False) == "DNSResolverDown"
    assert failing_alert(None, site_failing=True) == "DNSResolverDown"


@pytest.mark.unit
def test_failing_since_is_kept_across_reloads_that_keep_the_target() -> None:
    def cfg(labels: dict[str, str]) -> Config:
        return parse(
            {
                "modules": {"m": {}},
                "targets": [{"address": "192.0.2.1", "module": "m", "labels": labels}],
            },
            source="t.yml",
        )

    ok = ProbeResult(success=True, reason=None, duration=0.01, rcode=0, answer_rrs=1, detail="")
    bad = failed(Reason.TIMEOUT, 1.0, "no answer")
    p = Prober()
    p.configure(cfg({"site": "a"}))
    st = p.states[("192.0.2.1", "m")]
    st.observe(ok, 100)
    st.observe(bad, 115)
    st.observe(bad, 130)
    assert st.failing_since == 115
    p.configure(cfg({"site": "a"}))  # the same target
    assert p.states[("192.0.2.1", "m")].failing_since == 115
    p.configure(cfg({"site": "b"}))  # new labels, same target
    st = p.states[("192.0.2.1", "m")]
    assert st.failing_since == 115 and st.target.labels == (("site", "b"),)
    st.observe(ok, 145)
    assert st.failing_since is None


@pytest.mark.unit
def test_failing_column_says_since_when_even_with_readable_statistics() -> None:
    """The page's "failing" cell of a failing target whose statistics are readable says
    since when it fails (it once showed the uptime there instead), and a healthy target's
    is empty; the uptime stays in the statistics cell."""
    cfg = parse(
        {
            "modules": {"m": {}},
            "targets": [
                {"address": a, "module": "m", "stats": {"type": "unbound", "control": "unix:///x"}}
                for a in ("192.0.2.1", "192.0.2.2")
            ],
        },
        source="t.yml",
    )
    p = Prober()
    p.configure(cfg)
    ok = ProbeResult(success=True, reason=None, duration=0.01, rcode=0, answer_rrs=1, detail="")
    p.states[("192.0.2.1", "m")].observe(failed(Reason.RCODE, 0.01, "SERVFAIL"), 1000)
    p.states[("192.0.2.2", "m")].observe(ok, 1000)
    findings = Findings()
    for a in ("192.0.2.1", "192.0.2.2"):
        findings.add(ResolverReading(a, stats(start_time=400, software=("", "")), 400))
    view = StatusView(
        config=cfg,
        reload_status=ReloadStatus(True, 900),
        targets=p.snapshots(),
        facts=PageFacts.of(findings, [], wall=1000, duration=0.1),
        history=History(),
        runbook_base_url=RUNBOOK_BASE_URL,
    )
    page = render(view, metrics_path="/metrics", now=1060)
    rows = {
        r.split('data-target="', 1)[1].split('"', 1)[0]: r.split("<td>")
        for r in page.split("<tr ")[1:]
    }
    failing_cell = rows["192.0.2.1"][6]
    assert failing_cell.startswith('<span class="bad">since 60s ago (')
    assert rows["192.0.2.2"][6] == "</td>"
    assert "readable, up 11m" in "".join(rows["192.0.2.2"])


@pytest.mark.unit
def test_control_and_bidi_characters_in_labels_and_details_are_shown_as_escapes() -> None:
    """A configured label or a failure detail carrying ESC, BEL or a right-to-left override
    is shown on the page as the visible escape every other output stream prints: a raw
    U+202E makes the browser display the rest of the cell in reverse order."""
    cfg = parse(
        {
            "modules": {"m": {}},
            "targets": [
                {"address": "192.0.2.1", "module": "m", "labels": {"site": "a\x1b]0;x\x07\u202eb"}}
            ],
        },
        source="t.yml",
    )
    p = Prober()
    p.configure(cfg)
    p.states[("192.0.2.1", "m")].observe(failed(Reason.RCODE, 0.01, "SERVFAIL\u202egnp"), 1000)
    view = StatusView(
        config=cfg,
        reload_status=ReloadStatus(True, 900),
        targets=p.snapshots(),
        facts=None,
        history=History(),
        runbook_base_url=RUNBOOK_BASE_URL,
    )
    page = render(view, metrics_path="/metrics", now=1060)
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in page
    assert "site=a\\x1b]0;x\\x07\\u202eb" in page
    assert "SERVFAIL\\u202egnp" in page


@pytest.mark.unit
def test_page_facts_come_from_the_producers_typed_records() -> None:
    """The resolver's reading, its capacity figures, the canaries and the collectors' runs
    become the page's facts as they were handed over: nothing is read from a family."""
    findings = Findings()
    findings.add(
        ResolverReading("192.0.2.1:53", stats(start_time=400, queries=9), 400),
        ResolverReading("192.0.2.2:53", None, None),
        CapacityFigure("192.0.2.1:53", "hit", 5000, True),
        CapacityFigure("192.0.2.1:53", "miss", 0, False),
        CollectorRun("stub", True, 0.25),
        CollectorRun("nic", False, 0.5),
    )
    canaries = [
        CanaryReading("192.0.2.1:53", "m", "b1", False, "", True, 3, 950.0),
        CanaryReading("192.0.2.1:53", "n", None, None, "", None, 1, 990.0),
        CanaryReading("192.0.2.2:53", "m", None, None, "", None, None, None),
    ]
    facts = PageFacts.of(findings, canaries, wall=1000, duration=0.1)
    assert facts.resolvers["192.0.2.1:53"] == ResolverFacts(
        stats_up=True,
        software="unbound 1.17.1",
        started=400,
        capacity={"hit": 5000},
        lower_bound=frozenset({"hit"}),
        last_cache_reset=990.0,
        queries=9,
        cache_hits=0,
        cache_misses=0,
    )
    assert facts.resolvers["192.0.2.2:53"] == ResolverFacts(stats_up=False)
    assert list(facts.canaries) == [("192.0.2.1:53", "m")]
    assert facts.canaries[("192.0.2.1:53", "m")].unusable_reason == "unknown"
    assert facts.cache_resets == {("192.0.2.1:53", "m"): 3, ("192.0.2.1:53", "n"): 1}
    assert [(c.name, c.ok) for c in facts.collectors] == [("nic", False), ("stub", True)]
    assert not facts.stub_watched and not facts.stubs


@pytest.mark.unit
def test_the_status_package_reads_no_exposition() -> None:
    """The page is built from typed records: no module of status/ imports the exposition
    or a parser of its text."""
    import ast

    import dnsfleet.status

    root = Path(dnsfleet.status.__file__).parent
    for f in root.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names]
                assert not [n for n in names if "exposition" in n or "promtext" in n], f


@pytest.mark.unit
def test_runbook_base_url_default_is_the_rules_default() -> None:
    from alerts.generate import CONFIG, load_config

    assert load_config(CONFIG).runbook_base_url == RUNBOOK_BASE_URL


def stats(
    *,
    start_time: float | None = None,
    queries: int = 0,
    hits: int = 0,
    misses: int = 0,
    software: tuple[str, str] = ("unbound", "1.17.1"),
) -> ResolverStats:
    return ResolverStats(*software, start_time, queries, hits, misses, None)


def snap(
    wall: float,
    *,
    start: float,
    resets: int,
    last_reset: float | None,
    queries: int,
    hits: int | None = None,
    misses: int | None = None,
) -> PageFacts:
    """The facts of one scrape, from the records its producers hand over."""
    t = "192.0.2.1:53"
    findings = Findings()
    findings.add(
        ResolverReading(t, stats(queries=queries, hits=hits or 0, misses=misses or 0), start)
    )
    canary = CanaryReading(t, "m", None, True, "", True, resets, last_reset)
    return PageFacts.of(findings, [canary], wall=wall, duration=0.1)


@pytest.mark.unit
def test_history_remembers_restarts_resets_and_load() -> None:
    h = History()
    targets = ["192.0.2.1:53"]
    h.update(snap(1000, start=500, resets=0, last_reset=None, queries=0), targets)
    assert not h.events
    h.update(snap(1015, start=500, resets=1, last_reset=1010, queries=1500), targets)
    assert [(e.wall, e.what) for e in h.events["192.0.2.1:53"]] == [
        (1010, "cache reset seen by the canary (module m)")
    ]
    assert h.qps["192.0.2.1:53"] == 100
    h.update(snap(1030, start=1025, resets=1, last_reset=1010, queries=10), targets)
    assert h.events["192.0.2.1:53"][-1].what == "restarted (start time changed)"
    assert "192.0.2.1:53" not in h.qps  # the counter restarted: no rate across it
    h.update(snap(1045, start=1025, resets=1, last_reset=1010, queries=40), [])
    assert not h.events and not h.qps  # target removed from the config


@pytest.mark.unit
def test_history_keeps_the_cache_hit_ratio_between_scrapes() -> None:
    h = History()
    targets = ["192.0.2.1:53"]
    h.update(snap(1000, start=1, resets=0, last_reset=None, queries=0, hits=0, misses=0), targets)
    h.update(
        snap(1015, start=1, resets=0, last_reset=None, queries=1500, hits=1200, misses=300), targets
    )
    assert h.hit_ratio["192.0.2.1:53"] == 0.8
    h.update(
        snap(1030, start=1, resets=0, last_reset=None, queries=1500, hits=1200, misses=300), targets
    )
    assert "192.0.2.1:53" not in h.hit_ratio  # no traffic: 0/0 is no ratio
    h.update(snap(1045, start=1, resets=0, last_reset=None, queries=9, hits=5, misses=4), targets)
    assert "192.0.2.1:53" not in h.hit_ratio  # counters restarted


def cap(kind: str, v: float) -> tuple[str, float]:
    return (kind, v)


@pytest.mark.unit
@pytest.mark.parametrize(
    "caps,lower,qps,h,want",
    [
        ([], [], 10.0, 0.9, "unknown"),
        # declared wins over the measured figures, as in the recording rule
        (
            [cap("declared", 400), cap("hit", 5000), cap("miss", 500)],
            [],
            100.0,
            0.8,
            "75% (100 of 400 qps, declared; declared 400, hit 5000, miss 500 qps)",
        ),
        # the mix at the live hit ratio: 1 / (0.8/5000 + 0.2/500) = 1786
        (
            [cap("hit", 5000), cap("miss", 500)],
            [cap("hit", 1)],
            100.0,
            0.8,
            "94% (100 of 1786 qps, mix at 80% cache hits; hit ≥5000, miss 500 qps)",
        ),
        (
            [cap("hit", 5000), cap("miss", 500)],
            [],
            100.0,
            None,
            "80% (100 of 500 qps, miss figure: no live cache-hit ratio; hit 5000, miss 500 qps)",
        ),
        (
            [cap("hit", 5000)],
            [],
            4000.0,
            0.8,
            "20% (4000 of 5000 qps, hit figure only: "
            "optimistic, assumes every query cached; hit 5000 qps)",
        ),
        (
            [cap("miss", 500)],
            [],
            None,
            None,
            "capacity 500 qps (miss figure: no live cache-hit ratio; miss 500 qps)",
        ),
    ],
)
def test_status_page_capacity_cell(
    caps: list[tuple[str, float]],
    lower: list[tuple[str, float]],
    qps: float | None,
    h: float | None,
    want: str,
) -> None:
    findings = Findings()
    bounds = {kind for kind, v in lower if v == 1}
    findings.add(*(CapacityFigure("t", kind, v, kind in bounds) for kind, v in caps))
    facts = PageFacts.of(findings, [], wall=1, duration=0).resolvers.get("t")
    facts = facts or ResolverFacts()
    cell = _headroom(facts.capacity, facts.lower_bound, qps, h)
    assert (
        html.unescape(cell.split(">", 1)[-1].rsplit("<", 1)[0] if cell.startswith("<") else cell)
        == want
    )
    if qps is not None and caps:
        assert ('class="bad"' in cell) == want.startswith("20%")


# --------------------------------------------------------------------- the real page


@dataclass
class Page:
    exporter: ExporterProcess
    unbound: Unbound
    dead: str
    config: Path
    work: Path


RUNBOOKS = "https://wiki.example.net/dns/"


def spare_loopback() -> str:
    """A loopback address with nothing on port 53 (resolv.conf cannot name a port)."""
    import socket

    for third in range(60, 250):
        host = f"127.54.{third}.1"
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((host, 53))
        except OSError:
            continue
        return host
    pytest.fail("no free loopback address")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory, named: Named) -> Iterator[Page]:
    work = tmp_path_factory.mktemp("statuspage")
    u = Unbound(
        work / "u",
        stubs={"example.test.": f"127.0.0.1@{named.port}"},
        extra_server='  nsid: "ascii_page-u1"\n',
    )
    u.start()
    from tests.harness.tools import free_port

    dead = f"127.0.0.1:{free_port()}"
    root = work / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "resolv.conf").write_text(
        f"nameserver {spare_loopback()}\noptions timeout:1 attempts:1\n"
    )
    # A second file whose clients wait 1 s on a silent first nameserver, then get answers
    # from an unbound on port 53 of another loopback address: degraded.
    silent, answering = spare_loopback_pair()
    hole = Blackhole(host=silent, port=53)
    u53 = Unbound(work / "u53", host=answering, port=53, stubs=u.stubs)
    u53.start()
    (root / "etc" / "resolv.degraded.conf").write_text(
        f"nameserver {silent}\nnameserver {answering}\noptions timeout:1 attempts:1\n"
    )
    cfg = work / "dnsfleet.yml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "modules": {
                    "lab": {
                        "query_name": "www.example.test",
                        "query_type": "A",
                        "timeout": "500ms",
                        "canary": "canary.example.test",
                    }
                },
                "targets": [
                    {
                        "address": u.address,
                        "module": "lab",
                        "labels": {"site": "lab"},
                        "capacity_qps": 2000,
                        "stats": {"type": "unbound", "control": f"unix://{u.control_socket}"},
                    },
                    {"address": dead, "module": "lab", "labels": {"site": "lab"}},
                ],
                "resolv_conf": [
                    {
                        "path": path,
                        "query_name": "www.example.test",
                        "query_type": "A",
                        "probe_timeout": "300ms",
                    }
                    for path in ("/etc/resolv.conf", "/etc/resolv.degraded.conf")
                ],
            }
        )
    )
    exp = ExporterProcess(
        f"--config.file={cfg}",
        f"--path.rootfs={root}",
        "--web.enable-lifecycle",
        f"--web.runbook-base-url={RUNBOOKS}",
        cwd=work,
    )
    try:
        yield Page(exp, u, dead, cfg, work)
    finally:
        exp.stop()
        u53.stop()
        hole.close()
        u.stop()


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--hide-scrollbars",
    # Anything not on loopback goes to a proxy that does not exist: the page must be
    # complete without the network, and the browser must not reach out by itself.
    "--proxy-server=http://127.0.0.1:9",  # loopback itself is bypassed implicitly
)


def chromium(*args: str, timeout: float = 60) -> str:
    exe = shutil.which("chromium") or binary("chromium")
    # A profile of its own per run: two runs sharing one hand over to each other and the
    # second returns at once with nothing.
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        out = subprocess.run(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "HOME": profile},
        )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


class Dom(html.parser.HTMLParser):
    """Text of every element with an id or a data-target/data-collector attribute; the
    resources the page would load from elsewhere; the runbook links of each element."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.open: list[tuple[str, str]] = []
        self.external: list[str] = []
        self.runbooks: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a" and a.get("class") == "runbook":
            href = a.get("href") or ""
            for _, opened in self.open:
                self.runbooks.setdefault(opened, []).append(href)
        else:  # a link is followed by a person; anything else would be loaded
            for k in ("src", "href"):
                v = a.get(k) or ""
                if v.startswith(("http:", "https:", "//")):
                    self.external.append(v)
        key = a.get("id") or a.get("data-target") or a.get("data-collector")
        if key and tag not in ("meta", "link"):
            self.open.append((tag, key))
            self.text.setdefault(key, "")

    def handle_endtag(self, tag: str) -> None:
        if self.open and self.open[-1][0] == tag:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        for _, key in self.open:
            self.text[key] += data


def dom(page: Page) -> Dom:
    d = Dom()
    d.feed(chromium("--dump-dom", page.exporter.base + "/"))
    return d


def unbound_queries(u: Unbound) -> int:
    for line in u.control("stats_noreset").splitlines():
        if line.startswith("total.num.queries="):
            return int(line.split("=")[1])
    raise AssertionError("no total.num.queries")


@pytest.mark.integration
def test_page_before_any_scrape_says_so(page: Page) -> None:
    body = page.exporter.get("/")  # runs first: the module's exporter was never scraped
    assert "No scrape yet" in body and "not probed yet" in body
    assert "<script" not in body and "http://" not in body.replace(page.exporter.base, "")


@pytest.mark.integration
def test_incident_view_in_chromium(page: Page, tmp_path: Path) -> None:
    exp, u = page.exporter, page.unbound
    first = exp.get("/metrics")
    u.restart()  # a restart the page must show, with when
    second = exp.get("/metrics")
    targets = 2
    probes = value(second, "dnsfleet_probes_total")
    assert probes == 2 * targets and value(first, "dnsfleet_probes_total") == targets

    before = unbound_queries(u)
    d = dom(page)
    shot = tmp_path / "status.png"
    chromium("--window-size=1500,900", f"--screenshot={shot}", exp.base + "/")
    for _ in range(3):
        exp.get("/")
    assert unbound_queries(u) == before, "viewing the page sent queries to the resolver"
    third = exp.get("/metrics")
    assert value(third, "dnsfleet_probes_total") == 3 * targets

    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    keep = os.environ.get("DNSFLEET_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / "status-page.png")
    assert not d.external, d.external

    row = d.text[u.address]
    assert "OK" in row and "page-u1" in row  # result, backend (NSID)
    assert "readable: unbound" in row  # statistics
    assert "restarted (start time changed)" in row and "ago" in row
    assert "cached" in row or "usable" in row  # canary
    assert "qps" in row  # headroom vs 2000 qps
    assert "restart" in row and "UTC" in row  # the last restart, when
    assert u.address not in d.runbooks  # answering: no alert
    dead = d.text[page.dead]
    assert "FAIL: refused" in dead and "not configured" in dead
    assert "since" in dead and "ago (" in dead and "UTC)" in dead
    # The site still answers (u): the dead target raises DNSResolverDown, whose runbook is
    # under --web.runbook-base-url.
    assert d.runbooks[page.dead] == [f"{RUNBOOKS}DNSResolverDown.md"]
    stub = d.text["stub"]
    assert "ALL LOOKUPS FAIL" in stub and "/etc/resolv.conf" in stub
    assert "DEGRADED: +1.00s per lookup" in stub and "/etc/resolv.degraded.conf" in stub
    assert sorted(d.runbooks["stub"]) == [
        f"{RUNBOOKS}DNSStubFailoverDelay.md",
        f"{RUNBOOKS}DNSStubResolutionFailing.md",
        f"{RUNBOOKS}DNSStubResolutionFailing.md",
    ]
    assert "1 resolv.conf failing" in d.text["summary"]
    assert "1 resolv.conf degraded" in d.text["summary"]
    assert "ok" in d.text["resolver_stats"] and "FAILING" not in d.text["collectors"]
    assert "1 failing" in d.text["summary"] and "2 targets" in d.text["summary"]
    assert "Last scrape" in d.text["age"] and "ago" in d.text["age"]
    assert "loaded" in d.text["reload"]
    # failing first
    order = [k for k in d.text if k in (u.address, page.dead)]
    assert order == [page.dead, u.address]


@pytest.mark.integration
def test_failed_reload_shows_latest_error_only(page: Page) -> None:
    good = page.config.read_text()
    try:
        page.config.write_text("targets: [\n")
        status, _ = page.exporter.request("/-/reload", method="POST")
        assert status == 500
        page.config.write_text("")
        status, _ = page.exporter.request("/-/reload", method="POST")
        assert status == 500
        text = dom(page).text["reload"]
        assert "Last reload FAILED" in text and "the file is empty" in text
        assert "invalid YAML" not in text  # the latest error only
        metrics = page.exporter.get("/metrics")
        assert value(metrics, "dnsfleet_config_last_reload_successful") == 0
        assert value(metrics, "dnsfleet_targets") == 2  # still the old config
    finally:
        page.config.write_text(good)
        status, _ = page.exporter.request("/-/reload", method="POST")
    assert status == 200
    assert "Last reload FAILED" not in page.exporter.get("/")


@pytest.mark.integration
def test_failing_since_survives_a_reload_that_keeps_the_target(page: Page) -> None:
    """A reload that keeps the failing target (here with a label changed) keeps its
    "failing since"; the page shows the same time after the reload."""
    page.exporter.get("/metrics")
    before = dom(page).text[page.dead]
    since = before[before.index("ago (") : before.index("UTC)") + 4]
    good = page.config.read_text()
    doc = yaml.safe_load(good)
    for t in doc["targets"]:
        if t["address"] == page.dead:
            t["labels"]["rack"] = "r7"
    try:
        page.config.write_text(yaml.safe_dump(doc))
        status, _ = page.exporter.request("/-/reload", method="POST")
        assert status == 200
        page.exporter.get("/metrics")
        after = dom(page).text[page.dead]
        assert "rack=r7" in after
        assert after[after.index("ago (") : after.index("UTC)") + 4] == since
    finally:
        page.config.write_text(good)
        status, _ = page.exporter.request("/-/reload", method="POST")
    assert status == 200
