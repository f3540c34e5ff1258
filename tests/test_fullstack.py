"""Full-stack proof, real processes on loopback: dnsfleet-exporter + unbound (recursing to
BIND for a canary) + Prometheus + Alertmanager + a webhook receiver written here.

Prometheus runs compose/prometheus/prometheus.yml's dnsfleet job with 2s scrapes and 1s rule
evaluation; the rules are alerts/rules/*.yml with every `for`/`keep_firing_for` divided by
SCALE (expressions untouched); Alertmanager runs alerts/alertmanager.yml with the receivers
pointed at the webhook and group_wait 1s / group_interval 2s (routes and inhibitions
untouched). The stack:

- site "lab": unbound u1 (127.0.0.1, stopped and restarted by the test) and u2 (a spare
  loopback address, port 53), both read over their control sockets;
- site "lab2": two closed ports: every resolver of the site is down from the start;
- the exporter host's resolv.conf (under --path.rootfs): a silent first nameserver (a
  blackhole on port 53 of another spare loopback address), then u2; timeout:2 attempts:1;
- site "lab3": an exporter address nothing listens on;
- site "lab4": a resolver that answers every other query and drops the rest (partial
  loss: DNSResolverDown never fires for it, the failure-ratio alert pages).

The empty-config scenario truncates the exporter's file and reloads it: the exporter keeps
its configuration and DNSFleetConfigReloadFailed reaches the ticket receiver.

The measured fault-to-notification times are printed (`pytest -s`) and kept in MEASURED.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards import generate

from dnsfleet.capacity.model import Measurement, format_state
from dnsfleet.config import Endpoint
from tests.harness.consul_double import ConsulDouble
from tests.harness.exporter import ExporterProcess
from tests.harness.monitoring import (
    Alertmanager,
    Prometheus,
    Webhook,
    alertmanager_config,
    prometheus_config,
    scaled_rules,
)
from tests.harness.servers import Blackhole, Named, ScriptedServer, Unbound, answer
from tests.harness.tools import free_port

# make test runs each module whole and in order in one process (--dist loadfile): the
# scenarios feed the checks that follow, and the stack holds fixed loopback addresses.
pytestmark = pytest.mark.integration

SCALE = 30  # 2m -> 4s, 1m -> 2s, 5m -> 10s
# Divided by SCALE, DNSSiteDown's `for` (1m) would be one scrape interval: a single failed
# probe of a one-resolver site could fire it, and its inhibition (with the burn alerts'
# `unless` over a real 5m) then held back lab4's burn page for the rest of the module. Three
# scrape intervals instead; what DNSSiteDown mutes keeps a longer `for` than its, as in the
# real rules, so the inhibitor is in Alertmanager first and a dead site pages once.
FLOORS = {
    "DNSSiteDown": 6,
    "DNSResolverDown": 8,
    "DNSAvailabilityBudgetBurn": 8,
    "DNSLatencyBudgetBurn": 8,
}
MEASURED: dict[str, float] = {}


def spare_loopback_pair() -> tuple[str, str]:
    """Two loopback addresses whose port 53 (UDP and TCP) is free: resolv.conf cannot name a
    port, so the stub's servers must listen on 53."""
    for third in range(50, 250):
        pair = (f"127.53.{third}.1", f"127.53.{third}.2")
        try:
            for host in pair:
                for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                    with socket.socket(socket.AF_INET, kind) as s:
                        s.bind((host, 53))
        except OSError:
            continue
        return pair
    pytest.fail("no free port 53 on 127.53.x.1-2")


@dataclass
class Stack:
    prom: Prometheus
    am: Alertmanager
    hook: Webhook
    exporter: ExporterProcess
    u1: Unbound
    u2: Unbound
    lossy: ScriptedServer
    config: Path
    started: float


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, named: Named) -> Iterator[Stack]:  # noqa: PLR0915 (one scenario, read top to bottom)
    work = tmp_path_factory.mktemp("fullstack")
    silent_addr, u2_addr = spare_loopback_pair()
    stubs = {"example.test.": f"127.0.0.1@{named.port}"}
    # NSID so the backend-identity panels have something to show.
    u1 = Unbound(work / "u1", stubs=stubs, extra_server='  nsid: "ascii_u1"\n')
    u2 = Unbound(
        work / "u2", host=u2_addr, port=53, stubs=stubs, extra_server='  nsid: "ascii_u2"\n'
    )
    consul = ConsulDouble()
    blackhole = Blackhole(host=silent_addr, port=53)
    seen = [0]

    def every_other(query: bytes) -> list[bytes]:
        # One query in three goes unanswered: never three failed scrapes in a row, which
        # DNSSiteDown's `for` here (FLOORS) needs.
        seen[0] += 1
        if seen[0] % 3 == 0:
            return []
        return [answer(query, "www.example.test. 60 IN A 192.0.2.10")]

    lossy = ScriptedServer(every_other)
    dead = [free_port(), free_port()]
    dead_exporter = free_port()
    started: list[Any] = []
    try:
        consul.start()
        started.append(consul)
        consul.add_node("n1", "192.0.2.1")
        consul.register("web", "n1", 8080)
        consul.create_query("web-q", "web")
        for u in (u1, u2):
            u.start()
            started.append(u)
        root = work / "root"
        (root / "etc").mkdir(parents=True)
        # A raft.db for the Consul panels, and a capacity-test measurement for u2 (u1's
        # capacity is declared in the config).
        (root / "consul" / "raft").mkdir(parents=True)
        (root / "consul" / "raft" / "raft.db").write_bytes(b"\0" * 65536)
        (root / "var" / "lib" / "dnsfleet").mkdir(parents=True)
        (root / "var" / "lib" / "dnsfleet" / "capacity.json").write_text(
            format_state(
                {
                    Endpoint(u2.host, u2.port).key(): {
                        kind: Measurement(
                            kind=kind,
                            capacity_qps=qps,
                            lower_bound=False,
                            limit="loss",
                            measured_at=time.time() - 86400,
                            lost_percent=0.5,
                            max_loss_percent=1,
                            max_qps_offered=5000,
                            ramp_seconds=60,
                        )
                        for kind, qps in (("hit", 3000), ("miss", 900))
                    }
                }
            )
        )
        (root / "etc" / "resolv.conf").write_text(
            f"nameserver {silent_addr}\nnameserver {u2_addr}\noptions timeout:2 attempts:1\n"
        )
        module = {
            "query_name": "www.example.test",
            "query_type": "A",
            "timeout": "500ms",
            "canary": "canary.example.test",
        }

        def resolver(u: Unbound) -> dict[str, Any]:
            return {
                "address": u.address,
                "module": "lab",
                "labels": {"site": "lab"},
                "stats": {"type": "unbound", "control": f"unix://{u.control_socket}"},
            }

        config = {
            "modules": {
                "lab": module,
                "lossy": {"query_name": "www.example.test", "query_type": "A", "timeout": "300ms"},
            },
            "targets": [
                {**resolver(u1), "capacity_qps": 2000},
                resolver(u2),
                *(
                    {"address": f"127.0.0.1:{p}", "module": "lab", "labels": {"site": "lab2"}}
                    for p in dead
                ),
                {"address": lossy.address, "module": "lossy", "labels": {"site": "lab4"}},
            ],
            "resolv_conf": [
                {
                    "path": "/etc/resolv.conf",
                    "query_name": "www.example.test",
                    "query_type": "A",
                    "probe_timeout": "500ms",
                }
            ],
            "limits": {"scrape_timeout_offset": "300ms"},
            # A host path, read under --path.rootfs like every host file.
            "resolver": {"capacity_file": "/var/lib/dnsfleet/capacity.json"},
            "consul": {
                "agents": [
                    {
                        "name": "local",
                        "dns_address": consul.dns_address,
                        "http_address": consul.http_url,
                        "data_dir": "/consul",
                    }
                ],
                "services": ["web"],
                "prepared_queries": ["web-q"],
                "timeout": "500ms",
            },
        }
        cfg = work / "dnsfleet.yml"
        cfg.write_text(yaml.safe_dump(config))
        exporter = ExporterProcess(
            f"--config.file={cfg}", f"--path.rootfs={root}", "--web.enable-lifecycle", cwd=work
        )
        started.append(exporter)

        hook = Webhook().start()
        started.append(hook)
        am = Alertmanager(work / "am", alertmanager_config(hook))
        (work / "am").mkdir()
        am.start()
        started.append(am)
        targets = work / "targets.yml"
        targets.write_text(
            yaml.safe_dump(
                [
                    {"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"site": "lab"}},
                    {"targets": [f"127.0.0.1:{dead_exporter}"], "labels": {"site": "lab3"}},
                ]
            )
        )
        rules = scaled_rules(work / "rules", SCALE, floors=FLOORS)
        prom = Prometheus(
            work / "prom",
            prometheus_config(rule_files=rules, targets_file=targets, alertmanager_port=am.port),
        )
        (work / "prom").mkdir()
        prom.start()
        started.append(prom)
        yield Stack(prom, am, hook, exporter, u1, u2, lossy, cfg, time.time())
    finally:
        for thing in reversed(started):
            thing.stop()
        blackhole.close()
        lossy.close()


def hook_firing(hook: Webhook, receiver: str) -> list[tuple[float, dict[str, Any]]]:
    return [(t, a) for t, _, a in hook.firing(receiver)]


def first_sample_time(prom: Prometheus, expr: str) -> float:
    """Timestamp of the first scraped sample of a selector (raw samples, no lookback)."""
    result = prom.query(f"{expr}[10m]")
    assert result, f"no samples for {expr}"
    return min(float(v[0]) for r in result for v in r["values"])


def wait_scraped(stack: Stack) -> None:
    stack.prom.wait('up{job="dnsfleet",site="lab"} == 1', timeout=30)
    stack.prom.wait('dnsfleet_resolver_start_time_seconds{site="lab"}', timeout=30)


def test_standing_faults_are_delivered_and_inhibited(stack: Stack) -> None:
    """Faults present from the start: the stub's silent first nameserver, a dead site, a
    dead exporter; the Watchdog reaches the heartbeat receiver."""
    wait_scraped(stack)
    hook = stack.hook

    # The silent first nameserver costs the site's clients 2 s per lookup: the stub source
    # of its latency SLO burns and pages; the per-host alert is a ticket.
    crit = hook.wait_for(
        timeout=60,
        receiver="pager",
        alertname="DNSLatencyBudgetBurn",
        severity="critical",
        site="lab",
        source="stub",
    )
    fault = first_sample_time(stack.prom, 'dnsfleet_stub_expected_delay_seconds{libc="glibc"}')
    MEASURED["DNSLatencyBudgetBurn, stub (first scrape showing the delay -> pager)"] = (
        crit[0] - fault
    )
    # The host's DNSStubFailoverDelay says the same wait: it fires, muted by the page
    # (checked below with the other muted alerts), and reaches no receiver.
    prom_delay = stack.prom.wait(
        'ALERTS{alertname="DNSStubFailoverDelay",alertstate="firing",site="lab"}', timeout=60
    )
    assert prom_delay[0]["metric"]["resolv_conf"] == "/etc/resolv.conf"
    assert prom_delay[0]["metric"]["libc"] == "glibc"

    site = hook.wait_for(timeout=60, receiver="pager", alertname="DNSSiteDown", site="lab2")
    fault = first_sample_time(stack.prom, 'dnsfleet_probe_success{site="lab2"}')
    MEASURED["DNSSiteDown (first failed probe -> pager)"] = site[0] - fault

    down = hook.wait_for(
        timeout=60, receiver="pager", alertname="DNSFleetExporterDown", site="lab3"
    )
    fault = first_sample_time(stack.prom, 'up{site="lab3"}')
    MEASURED["DNSFleetExporterDown (first failed scrape -> pager)"] = down[0] - fault

    hook.wait_for(timeout=60, receiver="heartbeat", alertname="Watchdog")

    # The muted alerts must be active in Alertmanager (so the mute is what kept them
    # quiet, not their absence) and inhibited by the right source.
    deadline = time.monotonic() + 30
    muted: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        active = stack.am.alerts()
        muted = {}
        for a in active:
            lab = a["labels"]
            key = f"{lab['alertname']}/{lab.get('severity')}/{lab.get('site')}" + (
                f"/{lab['long']}" if "long" in lab else ""
            )
            muted.setdefault(key, []).extend(a["status"]["inhibitedBy"])
        if len(muted.get("DNSResolverDown/warning/lab2", [])) == 2 and muted.get(
            "DNSStubFailoverDelay/warning/lab"
        ):
            break
        time.sleep(0.5)
    assert len(muted["DNSResolverDown/warning/lab2"]) == 2, muted  # both dead resolvers
    assert muted["DNSStubFailoverDelay/warning/lab"], muted  # under the stub latency page
    # ... and the ones that page are not muted.
    assert not muted["DNSSiteDown/critical/lab2"]
    assert not muted["DNSLatencyBudgetBurn/critical/lab/1h"]

    time.sleep(3)  # past one more group_interval: still nothing delivered for the muted
    delivered = {
        (r, a["labels"]["alertname"], a["labels"].get("severity"), a["labels"].get("site"))
        for _, r, a in hook.firing()
    }
    assert not any(a == "DNSResolverDown" and s == "lab2" for _, a, _, s in delivered)
    assert not any(a == "DNSStubFailoverDelay" for _, a, _, _ in delivered), delivered
    # The dead site pages once: DNSSiteDown, not its availability burn as well.
    assert not any(
        r == "pager" and a != "DNSSiteDown" and s == "lab2" for r, a, _, s in delivered
    ), delivered
    assert not any(a == "DNSSiteDown" and s == "lab" for _, a, _, s in delivered)
    # info never notifies, except the Watchdog on its own receiver.
    assert all(r == "heartbeat" for r, a, sev, _ in delivered if sev == "info")


def test_resolver_stop_and_restart_are_delivered(stack: Stack) -> None:
    wait_scraped(stack)
    hook = stack.hook
    u1 = stack.u1
    up = f'dnsfleet_probe_success{{target="{u1.address}"}} == 1'
    stack.prom.wait(up, timeout=30)

    stopped = time.time()
    u1.stop()
    down = hook.wait_for(
        timeout=60, receiver="ticket", alertname="DNSResolverDown", target=u1.address
    )
    assert down[2]["labels"]["site"] == "lab"
    MEASURED["DNSResolverDown (unbound stopped -> ticket)"] = down[0] - stopped
    # One of two resolvers of lab is down: not a site outage.
    assert not stack.prom.query('ALERTS{alertname="DNSSiteDown",site="lab"}')

    restarted = time.time()
    u1.start()
    again = hook.wait_for(
        timeout=60, receiver="ticket", alertname="DNSResolverRestarted", target=u1.address
    )
    assert again[2]["labels"]["cause"].startswith("the resolver process restarted")
    assert not any(a["labels"].get("target") == u1.address for _, a in hook_firing(hook, "pager"))
    MEASURED["DNSResolverRestarted (unbound started -> ticket)"] = again[0] - restarted


def test_partial_loss_pages_where_resolver_down_cannot(stack: Stack) -> None:
    """A third of the probes of lab4's only resolver time out: a third of the site's probe
    rounds get no answer, its availability SLO burns and pages; the ratio alert opens a ticket, and
    DNSResolverDown (every probe failed) never fires for it."""
    wait_scraped(stack)
    crit = stack.hook.wait_for(
        timeout=90,
        receiver="pager",
        alertname="DNSAvailabilityBudgetBurn",
        severity="critical",
        site="lab4",
        source="probe",
    )
    fault = first_sample_time(
        stack.prom, f'dnsfleet_probe_success{{target="{stack.lossy.address}"}}'
    )
    MEASURED["DNSAvailabilityBudgetBurn, probe (first probe of a 33%-loss site -> pager)"] = (
        crit[0] - fault
    )
    ticket = stack.hook.wait_for(
        timeout=90, receiver="ticket", alertname="DNSResolverProbeFailuresHigh", site="lab4"
    )
    assert ticket[2]["labels"]["target"] == stack.lossy.address
    ratio = stack.prom.query(
        f'target:dnsfleet_probe_failures:ratio_rate10m{{target="{stack.lossy.address}"}}'
    )
    assert 0.15 < float(ratio[0]["value"][1]) < 0.5, ratio
    # Pending now and then (any failed scrape), never firing.
    assert not stack.prom.query(
        f'max_over_time(ALERTS{{alertname="DNSResolverDown",alertstate="firing",'
        f'target="{stack.lossy.address}"}}[10m])'
    )


def test_truncated_config_is_refused_and_reaches_the_webhook(stack: Stack) -> None:
    """`: > dnsfleet.yml` then a reload: the exporter keeps probing with the old
    configuration, and the failed reload reaches Alertmanager's ticket receiver."""
    wait_scraped(stack)
    good = stack.config.read_text()
    before = stack.prom.query('dnsfleet_targets{site="lab"}')
    try:
        stack.config.write_text("")
        truncated = time.time()
        status, body = stack.exporter.request("/-/reload", method="POST")
        assert status == 500 and "the file is empty" in body
        alert = stack.hook.wait_for(
            timeout=60, receiver="ticket", alertname="DNSFleetConfigReloadFailed", site="lab"
        )
        MEASURED["DNSFleetConfigReloadFailed (config truncated -> ticket)"] = alert[0] - truncated
        # Still probing every target of the old configuration.
        after = stack.prom.query('dnsfleet_targets{site="lab"}')
        assert after[0]["value"][1] == before[0]["value"][1]
        assert stack.prom.query(f'dnsfleet_probe_success{{target="{stack.u2.address}"}}')
    finally:
        stack.config.write_text(good)
        status, _ = stack.exporter.request("/-/reload", method="POST")
    assert status == 200


def test_effective_capacity_in_prometheus(stack: Stack) -> None:
    """The capacity rules in a real Prometheus: u1's declared figure wins; u2 has measured
    hit (3000) and miss (900) figures and statistics, so its capacity is the mix at its
    live cache-hit ratio, and its headroom is taken against that."""
    wait_scraped(stack)
    u1, u2 = stack.u1.address, stack.u2.address
    eff = "target:dnsfleet_resolver_capacity_effective:qps"
    stack.prom.wait(f'{eff}{{target="{u2}",basis="mix"}}', timeout=60)
    (declared,) = stack.prom.query(f'{eff}{{target="{u1}"}}')
    assert declared["metric"]["basis"] == "declared" and float(declared["value"][1]) == 2000
    hit = f'target:dnsfleet_resolver_cache_hit:ratio_rate5m{{target="{u2}"}}'
    (gap,) = stack.prom.query(
        f'abs({eff}{{target="{u2}"}} - on (instance, site, target) '
        f"(1 / ({hit} / 3000 + (1 - {hit}) / 900)))"
    )
    assert float(gap["value"][1]) < 1e-6
    (head,) = stack.prom.query(f'target:dnsfleet_resolver_capacity_headroom:ratio{{target="{u2}"}}')
    assert head["metric"]["basis"] == "mix" and 0 < float(head["value"][1]) <= 1


# Queries whose metrics all exist yet may return nothing in a short run, and why.
MAY_BE_EMPTY = {
    "Days to capacity": "the projection needs a week of history and growing load; the "
    "rule is proven in alerts/tests/capacity_trend.test.yml",
    "Firing alerts by site": "only alerts with a site that fire right now; the scenarios "
    "above restore the stack, and the Watchdog carries no site",
    "Error budget left per site": "the period's error ratio averages the 1h ratio sampled "
    "on the hour: empty until an hour boundary has passed since Prometheus started; the "
    "rule is proven in alerts/tests/slo.test.yml",
    "Lowest budget left": "as above",
    # A reset is judged only when the canary's countdown is seen to jump inside the
    # restart scenario's few scrapes; once in a three-process run it was not (load ~2).
    # Restart and reset detection are proven against real daemons in test_canary_real.py
    # and test_resolver_real.py.
    "annotation: Cache resets": "a reset may not be judged within the restart scenario",
    "Error budget left over time": "as above",
    # The stack runs no signed zone, validating resolver or TLS listener; these
    # families are proven against real daemons in tests/test_dnssec.py and
    # tests/test_encrypted.py, and the queries are checked by promtool (test_dashboards.py).
    **{
        title: "no signed zone, DNSSEC module or DoT/DoH listener in the stack"
        for title in (
            "Signature expiry per zone",
            "SOA serial per nameserver",
            "Serial drift against refresh",
            "DS match and nameservers answering",
            "Resolvers validating",
            "Extended DNS Errors per code",
            "TLS handshake share of latency",
            "Certificate expiry",
            "Encrypted transport failures",
        )
    },
    # The stack runs no pod: the pod view is proven against glibc and musl in pod
    # namespaces (tests/test_podview_*.py), its rules in alerts/tests/podview.test.yml.
    **{
        title: "no pod_view in the stack"
        for title in (
            "Pod lookups failing",
            "Pod lookup wait",
            "Queries per pod lookup",
            "Pod lookups failing by reason",
        )
    },
    # Nor a NodeLocal DNSCache or a cluster DNS streaming dnstap: proven in
    # tests/test_nodelocal.py and tests/test_dnstap_leaks_real.py, their rules by promtool.
    **{
        title: "no NodeLocal DNSCache or cluster DNS dnstap in the stack"
        for title in (
            "Who answers each node's pods",
            "Search-list expansions answered NXDOMAIN",
            "Cluster names sent upstream",
        )
    },
}


def test_dashboard_queries_against_prometheus(stack: Stack) -> None:
    """Every panel and annotation query runs (variables on "All"); where the stack
    produces every metric a query reads, it must return data."""
    present = set(stack.prom.query_names())
    problems = []
    ran = 0
    for name in generate.DASHBOARDS:
        doc = json.loads((generate.OUT / f"{name}.json").read_text())
        for title, expr in generate.panel_queries(doc):
            result = stack.prom.query(generate.concrete(expr, rate_interval="10s"))
            ran += 1
            needs = set(METRIC.findall(expr)) - {"ALERTS"}
            produced = needs <= present
            if produced and not result and title not in MAY_BE_EMPTY:
                problems.append(f"{name} / {title}: no data from {expr}")
            NO_DATA[f"{name} / {title}"] = sorted(needs - present)
    assert not problems, "\n".join(problems)
    assert ran > 50
    # What the stack cannot produce: the host collectors (no bonding or cpuidle
    # on this machine). Everything else must be covered.
    missing = {k: v for k, v in NO_DATA.items() if v}
    # Nor Kubernetes (kube-state-metrics, CoreDNS) for the cluster DNS panel, whose rules
    # are proven with recorded series in alerts/tests/capacity.test.yml.
    outside_host = {
        k: v
        for k, v in missing.items()
        if not k.startswith("host-latency /")
        and k != "capacity-trend / Cluster DNS replicas"
        # unbound, the stack's resolver, counts no upstream round trips or timeouts:
        # BIND's, PowerDNS's and CoreDNS's are proven in test_resolver_detail_real.py.
        and k not in UPSTREAM_PANELS
        and k.split(" / ", 1)[1] not in MAY_BE_EMPTY
    }
    assert not outside_host, outside_host


UPSTREAM_PANELS = {
    "resolver-detail / Upstream round-trip time",
    "resolver-detail / Queries dropped by reason",
}
MIGRATION = Path(__file__).resolve().parent.parent / "docs" / "migration.md"
PROMQL_BLOCK = re.compile(r"```promql\n(.*?)\n```", re.DOTALL)
# An alert's comparison filters a healthy stack's series out: the data check drops it.
COMPARISON = re.compile(r"\s*(==|!=|>|<|>=|<=)\s*[0-9.]+\s*$")


def test_migration_queries_against_prometheus(stack: Stack) -> None:
    """docs/migration.md's rewritten PromQL (its `promql` blocks) runs on the stack's real
    Prometheus; where the stack produces every metric a query reads, it returns data."""
    present = set(stack.prom.query_names())
    queries = PROMQL_BLOCK.findall(MIGRATION.read_text())
    assert len(queries) >= 30
    problems = []
    for expr in queries:
        run = generate.concrete(expr)
        stack.prom.query(run)  # raises on anything Prometheus refuses
        needs = set(METRIC.findall(expr))
        if needs <= present and not stack.prom.query(COMPARISON.sub("", run)):
            problems.append(f"no data from {expr}")
    assert not problems, "\n".join(problems)


METRIC = re.compile(
    r"\b((?:dnsfleet_|dnsfleet:|target:|instance_agent:|cluster:|site:|fleet:|kube_|coredns_)"
    r"[a-zA-Z0-9_:]+)"
)
NO_DATA: dict[str, list[str]] = {}


def test_report_fault_to_notification() -> None:
    if not MEASURED:  # they ran in another test process
        pytest.skip("the scenarios above ran in another process: nothing to report")
    print(f"\nfault-to-notification (rules' `for` / {SCALE}, scrape 2s, eval 1s, group_wait 1s):")
    for what, secs in MEASURED.items():
        print(f"  {secs:6.1f} s  {what}")
    assert all(s > 0 for s in MEASURED.values())
