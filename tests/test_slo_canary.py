"""dnsfleet's own DNSSEC check never pages, on real daemons: a validating unbound in front
of BIND serving signed zones (tests/harness/dnssec.py), probed by the exporter with a
plain module and the documented `dnssec: expect_bogus` check (a deliberately broken name:
every passing probe is a SERVFAIL in unbound's own counters), its statistics read over
the control socket; Prometheus evaluating the generated SLO rules and the probe rules with
every window and `for` divided by 60, as tests/test_slo_fullstack.py does (66 s here is
66 minutes). Quiet for 66 s with no client traffic, then 66 s with 5 queries a second
from a client: no alert fires, and the resolver SLI stays far below a page, while
unbound's SERVFAIL counter proves the check ran all along."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import dns.message
import dns.query
import pytest
import yaml
from alerts import generate

from tests.harness.dnssec import SignedNamed, make_zones, validating_unbound
from tests.harness.exporter import ExporterProcess
from tests.harness.monitoring import Prometheus, prometheus_config, scaled_rules
from tests.harness.servers import Unbound
from tests.test_slo_fullstack import SCALE, scaled, scaled_config

pytestmark = pytest.mark.integration

RUN = 66  # seconds: 66 minutes at SCALE
SITE = "val"


def servfails(prom: Prometheus) -> float:
    got = prom.query(f'sum(dnsfleet_resolver_responses_total{{site="{SITE}",rcode="SERVFAIL"}})')
    return float(got[0]["value"][1]) if got else 0.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Unbound]]:
    d = tmp_path_factory.mktemp("slo-canary")
    zones = make_zones(d / "zones")
    started: list[Any] = []
    try:
        primary = SignedNamed(d / "primary", zone_files=dict(zones.files))
        started.append(primary.start())
        unbound = validating_unbound(d / "validating", zones, primary.address)
        started.append(unbound.start())
        modules = {
            "plain": {"query_name": "www.example.test", "query_type": "A", "timeout": "800ms"},
            "bogus": {
                "query_name": "bogus.example.test",
                "query_type": "A",
                "timeout": "800ms",
                "dnssec": "expect_bogus",
            },
        }
        config = {
            "modules": modules,
            "targets": [
                {
                    "address": unbound.address,
                    "module": m,
                    "labels": {"site": SITE},
                }
                | (
                    {"stats": {"type": "unbound", "control": f"unix://{unbound.control_socket}"}}
                    if m == "plain"
                    else {}
                )
                for m in modules
            ],
            "resolv_conf": [],
            "limits": {"scrape_timeout_offset": "150ms"},
        }
        cfg = d / "dnsfleet.yml"
        cfg.write_text(yaml.safe_dump(config))
        exporter = ExporterProcess(f"--config.file={cfg}", cwd=d)
        started.append(exporter)
        targets = d / "targets.yml"
        targets.write_text(
            yaml.safe_dump([{"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"site": SITE}}])
        )
        generated = d / "generated"
        generated.mkdir()
        files = generate.generate(scaled_config(), generate.RULES, generated)
        for name, text in files.items():
            (generated / name).write_text(text)
        rules = scaled_rules(d / "rules", SCALE, source=generated)
        (d / "rules" / generate.SLO_FILE).write_text(files[generate.SLO_FILE])
        (d / "prom").mkdir()
        prom = Prometheus(
            d / "prom",
            prometheus_config(
                rule_files=rules,
                targets_file=targets,
                alertmanager_port=None,
                scrape_interval="1s",
                evaluation_interval="1s",
            ),
        )
        started.append(prom.start())
        yield prom, unbound
    finally:
        for s in reversed(started):
            s.stop()


def clients(address: str, stop: threading.Event, sent: list[int]) -> None:
    """5 lookups a second of a name that validates, until ``stop`` (at most RUN + 30 s)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + RUN + 30
    while not stop.is_set() and time.monotonic() < deadline:
        q = dns.message.make_query("www.example.test", "A", use_edns=0)
        with contextlib.suppress(TimeoutError):
            dns.query.udp(q, host, timeout=2, port=int(port or 53))
        sent[0] += 1
        stop.wait(0.2)


def assert_quiet(prom: Prometheus, since: float) -> None:
    window = f"{int(time.time() - since) + 1}s"
    fired = prom.query(
        f'max_over_time(ALERTS{{alertstate="firing", alertname!="Watchdog"}}[{window}])'
    )
    assert fired == [], [f["metric"] for f in fired]
    page = 14.4 * 0.001
    for w in (scaled("1h"), scaled("6h")):
        ratio = prom.query(
            f'site:dnsfleet_slo_errors:ratio_rate{w}{{site="{SITE}",source="resolver"}}'
        )
        assert ratio, f"no resolver SLI over {w}"
        # Below the page's burn rate (the claim): the scaled 1h window is 60 s, where one
        # SERVFAIL whose bogus probe is counted a scrape later reads as ~0.8 %; half the
        # threshold failed there once on a busy machine (0.0084 against 0.0072).
        assert float(ratio[0]["value"][1]) < page, ratio


def test_the_expect_bogus_check_pages_nothing(lab: tuple[Prometheus, Unbound]) -> None:
    prom, unbound = lab
    prom.wait(
        f'site:dnsfleet_slo_errors:ratio_rate{scaled("5m")}{{site="{SITE}",source="resolver"}}',
        timeout=60,
    )
    prom.wait(f'dnsfleet_probe_success{{site="{SITE}",module="bogus"}} == 1', timeout=60)
    start, before = time.time(), servfails(prom)
    time.sleep(RUN)
    assert servfails(prom) - before >= RUN / 2, "the bogus check made no SERVFAIL"
    assert_quiet(prom, start)

    stop, sent = threading.Event(), [0]
    thread = threading.Thread(target=clients, args=(unbound.address, stop, sent), daemon=True)
    start = time.time()
    thread.start()
    try:
        time.sleep(RUN)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert sent[0] >= RUN * 3, sent  # about 5 a second
    assert_quiet(prom, start)
