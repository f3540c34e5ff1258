"""The fleet path end to end on real engines: EXPORTERS exporter replicas, each configured
with the hashmod share of a fleet of a few thousand loopback resolvers; AGENTS Prometheus
agents (Debian's Prometheus 2, ``--enable-feature=agent``), sharded over the replicas with
a hashmod relabel rule, remote-writing every sample to two central stores: Prometheus with
its remote-write receiver, evaluating alerts/rules, and VictoriaMetrics single-node
(built from the Go module proxy) with vmalert evaluating the same rule files. One local
Prometheus scrapes every replica itself with the same rules: the reference.

Sites: `steady` (served by one unbound on many addresses), `burn` (ScriptedServers that
refuse 1 of every 6 queries: a slow burn) and `down` (nobody listens: the
kernel refuses, a site outage). After the outage and the burn fire, and again after one
replica is stopped, the firing alerts of the scenarios (SUBJECT: every label compared) are
the same in the three places, and they name down-site resolvers from every shard: a
central view that missed a shard would differ.

Scaled: the SLO windows, period and `for` divided by SCALE through the generator's own
parameters, the hand-written rules' `for` the same way. Not further: the central stores
lag the scrapes by the agents' send deadline and more when the machine is busy, and a rule
whose window is not much longer than that lag flickers there (in production: seconds
against minutes). The availability objective is 96 % so that a burn between the tickets' and the
pages' thresholds (0.12 and 0.24 of probes failing) is measurable in the few probes a
scaled window holds, and the latency SLO's likewise: a busy machine's stall of a second is
not a page here. The module's timeout (2 s) outlasts such a stall too.

The local Prometheus and the agents scrape each replica apart, and a scrape may be
answered by a cycle of its own or, on a starved machine, by the freshest complete one: the
gauges of single probes can differ between the two views (an agent's view once held a
burning resolver's failure for four scrapes), the counters agree. The burn is REFUSED, not
SERVFAIL, so DNSResolverServfailHigh stays out of it. Prints the cost per target
(`pytest -s`; DNSFLEET_FLEET_TARGETS for another size)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from alerts import generate

from tests.harness.exporter import ExporterProcess
from tests.harness.fleet import (
    QNAME,
    Burner,
    PrometheusAgent,
    PrometheusReceiver,
    VictoriaMetrics,
    VmAlert,
    addresses,
    cpu_seconds,
    exporter_config,
    hashmod,
    rss_bytes,
    scraped_value,
)
from tests.harness.monitoring import Prometheus, http_get, prometheus_config, scaled_rules
from tests.harness.process import Daemon
from tests.harness.servers import Unbound

pytestmark = pytest.mark.integration

SCALE = 10
EXPORTERS = 4
AGENTS = 2
STEADY = int(os.environ.get("DNSFLEET_FLEET_TARGETS", "1000"))
BURN = 16
DOWN = 32
INTERVAL = "3s"
EVALUATION = "2s"
Alert = frozenset[tuple[str, str]]


def scaled(duration: str) -> str:
    return f"{max(1, generate.seconds(duration, 'test') // SCALE)}s"


def rules_config() -> generate.Config:
    doc: dict[str, Any] = yaml.safe_load(generate.CONFIG.read_text())
    doc["period"] = scaled(doc["period"])
    for b in doc["burn_rates"]:
        b["long"], b["short"] = scaled(b["long"]), scaled(b["short"])
        if "for" in b:
            b["for"] = scaled(b["for"])
    for slo in doc["slos"]:
        slo["objective"] = 0.96
    return generate.parse_config(doc)


def write_rules(work: Path) -> list[Path]:
    generated = work / "generated"
    generated.mkdir()
    for name, text in generate.generate(rules_config(), generate.RULES, generated).items():
        (generated / name).write_text(text)
    slo = (generated / generate.SLO_FILE).read_text()
    rules = scaled_rules(work / "rules", SCALE, source=generated)
    (work / "rules" / generate.SLO_FILE).write_text(slo)
    return rules


@dataclass
class Fleet:
    local: Prometheus
    central: PrometheusReceiver
    vm: VictoriaMetrics
    vmalert: VmAlert
    exporters: list[ExporterProcess]
    agents: list[PrometheusAgent]
    sites: dict[str, list[str]]
    port: int
    figures: dict[str, float] = field(default_factory=dict)

    def shard(self, target: str) -> int:
        return hashmod(target, EXPORTERS)


def scrape_job(targets_file: Path) -> dict[str, Any]:
    cfg = prometheus_config(rule_files=[], targets_file=targets_file, alertmanager_port=None)
    job: dict[str, Any] = cfg["scrape_configs"][0]
    return job


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("fleet")
    with ExitStack() as stack:
        unbound = Unbound(work / "unbound", extra_server="")
        port = unbound.port
        sites = {
            "steady": [f"{a}:{port}" for a in addresses(61, STEADY)],
            "burn": [f"{a}:{port}" for a in addresses(62, BURN)],
            "down": [f"{a}:{port}" for a in addresses(63, DOWN)],
        }
        unbound.extra_server = "".join(f"  interface: {a}\n" for a in addresses(61, STEADY)) + (
            "  do-tcp: no\n  so-rcvbuf: 4m\n  so-sndbuf: 4m\n"
        )
        unbound.local_data = [f"{QNAME}. 3600 IN A 192.0.2.1"]
        unbound.start()
        stack.callback(unbound.stop)
        for a in addresses(62, BURN):
            stack.callback(Burner(a, port).server.close)

        exporters: list[ExporterProcess] = []
        everything = [(t, s) for s, ts in sites.items() for t in ts]
        for k in range(EXPORTERS):
            d = work / f"exporter{k}"
            d.mkdir()
            share = [(t, s) for t, s in everything if hashmod(t, EXPORTERS) == k]
            exporter_config(d / "dnsfleet.yml", share)
            e = ExporterProcess(f"--config.file={d / 'dnsfleet.yml'}", cwd=d)
            stack.callback(e.stop)
            exporters.append(e)
        targets = work / "exporters.yml"
        # `__replica` is only for the agents' hashmod: dropped after relabelling like every
        # `__` label, so the series are the same whoever scraped them.
        targets.write_text(
            yaml.safe_dump(
                [
                    {
                        "targets": [f"127.0.0.1:{e.port}"],
                        "labels": {"site": "fleet", "__replica": f"dnsfleet-{k}"},
                    }
                    for k, e in enumerate(exporters)
                ]
            )
        )
        rules = write_rules(work)
        (work / "local").mkdir()
        local_cfg = prometheus_config(
            rule_files=rules,
            targets_file=targets,
            alertmanager_port=None,
            scrape_interval=INTERVAL,
            evaluation_interval=EVALUATION,
        )
        local = Prometheus(work / "local", local_cfg).start()
        stack.callback(local.stop)
        (work / "central").mkdir()
        central_cfg = {
            "global": {"evaluation_interval": EVALUATION},
            "rule_files": [str(p) for p in rules],
        }
        central = PrometheusReceiver(work / "central", central_cfg).start()
        stack.callback(central.stop)
        (work / "vm").mkdir()
        vm = VictoriaMetrics(work / "vm").start()
        stack.callback(vm.stop)
        (work / "vmalert").mkdir()
        vmalert = VmAlert(
            work / "vmalert", rule_files=tuple(rules), datasource=vm.url, interval=EVALUATION
        ).start()
        stack.callback(vmalert.stop)

        agents: list[PrometheusAgent] = []
        for i in range(AGENTS):
            job = scrape_job(targets)
            job["relabel_configs"] = [
                {
                    "source_labels": ["__replica"],
                    "modulus": AGENTS,
                    "target_label": "__tmp_agent",
                    "action": "hashmod",
                },
                {"source_labels": ["__tmp_agent"], "regex": str(i), "action": "keep"},
                *job["relabel_configs"],
            ]
            # Batches of 5,000 from four shards at once: the default 500 from one shard
            # fell minutes behind the scrapes at start.
            queue = {
                "batch_send_deadline": "1s",
                "max_backoff": "1s",
                "max_samples_per_send": 5000,
                "capacity": 20000,
                "min_shards": 4,
            }
            cfg = {
                "global": {"scrape_interval": INTERVAL, "scrape_timeout": INTERVAL},
                "scrape_configs": [job],
                "remote_write": [
                    {"url": f"{central.url}/api/v1/write", "queue_config": queue},
                    {"url": f"{vm.url}/api/v1/write", "queue_config": queue},
                ],
            }
            (work / f"agent{i}").mkdir()
            agent = PrometheusAgent(work / f"agent{i}", cfg).start()
            stack.callback(agent.stop)
            agents.append(agent)
        yield Fleet(local, central, vm, vmalert, exporters, agents, sites, port)


def labels_of(alerts: list[dict[str, Any]]) -> set[Alert]:
    # vmalert adds the rule group's name as `alertgroup`; Prometheus does not.
    return {frozenset((k, v) for k, v in a["labels"].items() if k != "alertgroup") for a in alerts}


def firing(prom: Prometheus) -> set[Alert]:
    body = http_get(f"{prom.url}/api/v1/alerts")
    return labels_of([a for a in body["data"]["alerts"] if a["state"] == "firing"])


def named(alerts: set[Alert], name: str, **labels: str) -> set[Alert]:
    want = {("alertname", name), *labels.items()}
    return {a for a in alerts if want <= a}


# The alerts the scenarios are about, compared whole: the site pages and tickets, the SLO
# burns, the exporters' health, and each resolver of the outage. Left out: per-resolver
# alerts on latency and on single probes of the healthy and burning sites, which the
# machine's load decides (a load average of 20 put p90 latency over 100 ms on some
# replicas) and which the reference and the agents, scraping apart, may sample apart.
SUBJECT = {
    "DNSSiteDown",
    "DNSAvailabilityBudgetBurn",
    "DNSFleetExporterDown",
    "DNSFleetExportersAbsent",
    "Watchdog",
}


def subject(alerts: set[Alert]) -> set[Alert]:
    def kept(a: Alert) -> bool:
        labels = dict(a)
        name = labels["alertname"]
        return name in SUBJECT or (name == "DNSResolverDown" and labels.get("site") == "down")

    return {a for a in alerts if kept(a)}


def same_everywhere(f: Fleet, *, timeout: float = 120) -> set[Alert]:
    """Poll until the local Prometheus, the central one and vmalert fire the same alerts of
    the SUBJECT; those alerts. Central data lags the local scrapes by the agents' send
    deadline, so an alert may be pending there a little longer."""
    deadline = time.monotonic() + timeout
    while True:
        local = subject(firing(f.local))
        central = subject(firing(f.central))
        vm = subject(labels_of(f.vmalert.firing()))
        if local == central == vm:
            return local
        if time.monotonic() > deadline:
            raise AssertionError(
                "firing alerts differ:\n"
                f"local only: {sorted(map(sorted, local - central - vm))[:10]}\n"
                f"central missing: {sorted(map(sorted, local - central))[:10]}\n"
                f"central extra: {sorted(map(sorted, central - local))[:10]}\n"
                f"vmalert missing: {sorted(map(sorted, local - vm))[:10]}\n"
                f"vmalert extra: {sorted(map(sorted, vm - local))[:10]}\n" + diagnosis(f)
            )
        time.sleep(1)


def diagnosis(f: Fleet) -> str:
    """How far behind each store is, and the SLO ratios it computes."""
    out = []
    for name, query in (("local", f.local.query), ("central", f.central.query), ("vm", f.vm.query)):
        for expr in (
            "time() - max(timestamp(dnsfleet_probe_attempts_total))",
            "count(dnsfleet_probe_attempts_total)",
            'site:dnsfleet_slo_errors:ratio_rate720s{source="probe"}',
            'sum by (site, reason) (increase(dnsfleet_probe_failures_total{site!="down"}[1m])) > 0',
            "count by (instance) (resets(dnsfleet_probe_latency_seconds_count[5m]) > 0)",
            "count by (instance) (resets(dnsfleet_probe_attempts_total[5m]) > 0)",
        ):
            try:
                got = [
                    (r["metric"].get("site", r["metric"].get("instance", "")), r["value"][1])
                    for r in query(expr)
                ]
            except OSError as e:  # a diagnosis, not the verdict: a busy store may time out
                got = [("error", str(e))]
            out.append(f"{name}: {expr} = {got}")
    return "\n".join(out)


def wait_local(f: Fleet, name: str, *, timeout: float = 120, **labels: str) -> None:
    deadline = time.monotonic() + timeout
    while not named(firing(f.local), name, **labels):
        assert time.monotonic() < deadline, f"{name} {labels} did not fire locally"
        time.sleep(1)


def proc_rss(d: Daemon) -> int:
    assert d.proc is not None
    return rss_bytes(d.proc.pid)


def measure(f: Fleet, seconds: float) -> None:
    """Cost per target over a window of the steady run: exporter CPU (both the local
    Prometheus and an agent scrape every replica), RSS, series, remote-write bytes."""
    n = sum(len(ts) for ts in f.sites.values())
    pids = [e.proc.pid for e in f.exporters]
    cpu0 = sum(cpu_seconds(p) for p in pids)
    sent0 = sum(
        scraped_value(f"{a.url}/metrics", "prometheus_remote_storage_bytes_total") for a in f.agents
    )
    scrapes0 = sum(float(s["value"][1]) for s in f.local.query("dnsfleet_scrapes_total"))
    time.sleep(seconds)
    cpu = sum(cpu_seconds(p) for p in pids) - cpu0
    sent = (
        sum(
            scraped_value(f"{a.url}/metrics", "prometheus_remote_storage_bytes_total")
            for a in f.agents
        )
        - sent0
    )
    scrapes = sum(float(s["value"][1]) for s in f.local.query("dnsfleet_scrapes_total")) - scrapes0
    series = float(f.local.query('count({job="dnsfleet"})')[0]["value"][1])
    f.figures.update(
        targets=n,
        scrapes=scrapes,
        exporter_cpu_ms_per_target_scrape=cpu * 1000 / n / max(scrapes / EXPORTERS, 1),
        exporter_rss_mb=sum(rss_bytes(p) for p in pids) / EXPORTERS / 2**20,
        series_per_target=series / n,
        central_prometheus_rss_kb_per_series=proc_rss(f.central) / 1024 / series,
        victoriametrics_rss_kb_per_series=proc_rss(f.vm) / 1024 / series,
        agent_rss_kb_per_series=sum(proc_rss(a) for a in f.agents) / 1024 / series,
        # Two remote-write queues per agent (Prometheus and VictoriaMetrics): one store's.
        remote_write_bytes_per_target_minute=sent / 2 / n * 60 / seconds,
    )
    print("fleet figures:", {k: round(v, 4) for k, v in f.figures.items()})


def test_central_rules_fire_what_one_prometheus_fires(fleet: Fleet) -> None:
    f = fleet
    wait_local(f, "DNSSiteDown", site="down")
    wait_local(f, "DNSAvailabilityBudgetBurn", site="burn", severity="warning")
    got = same_everywhere(f)
    assert named(got, "DNSSiteDown", site="down")
    assert not named(got, "DNSSiteDown", site="burn")
    # A slow burn: the tickets, no page.
    assert named(got, "DNSAvailabilityBudgetBurn", site="burn", severity="warning")
    assert not named(got, "DNSAvailabilityBudgetBurn", site="burn", severity="critical")
    assert not named(got, "DNSSiteDown", site="steady")
    # Every shard's resolvers are in it: a store that lost a shard would lack its share.
    down = named(got, "DNSResolverDown", site="down")
    assert {dict(a)["target"] for a in down} == set(f.sites["down"])
    assert {f.shard(dict(a)["target"]) for a in down} == set(range(EXPORTERS))

    measure(f, 20)

    gone = f.exporters[-1]
    instance = f"127.0.0.1:{gone.port}"
    gone.stop()
    wait_local(f, "DNSFleetExporterDown", instance=instance)
    got = same_everywhere(f)
    assert named(got, "DNSFleetExporterDown", instance=instance, severity="warning")
    assert named(got, "DNSSiteDown", site="down")
