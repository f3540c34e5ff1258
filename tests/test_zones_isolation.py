"""The zone checks, one nameserver apart from the others: a nameserver that truncates and
then stalls over TCP costs its own series only, within the zone's timeout; zone sockets
stay inside the open-file budget, so hundreds of silent zones under a low descriptor limit
do not make a healthy nameserver read as down. Real sockets on loopback."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.rdatatype
import dns.rrset
import pytest
import yaml

from tests.harness.exporter import EXPORTER
from tests.harness.inprocess import exporter
from tests.harness.metrics import samples, value
from tests.harness.servers import Blackhole, ScriptedServer, scripted

pytestmark = pytest.mark.integration

ZONE = "iso.test."
SERIAL = 2026112601
SOA_TEXT = f"ns.{ZONE} hostmaster.{ZONE} {SERIAL} 3600 600 86400 60"


def authoritative(query: bytes, *, tc: bool = False) -> bytes:
    """The zone's answer: AA, the SOA when asked for it, nothing else (an unsigned zone)."""
    q = dns.message.from_wire(query)
    r = dns.message.make_response(q)
    r.flags |= dns.flags.AA
    if tc:
        r.flags |= dns.flags.TC
    elif q.question and q.question[0].rdtype == dns.rdatatype.SOA:
        r.answer.append(dns.rrset.from_text(q.question[0].name, 60, "IN", "SOA", SOA_TEXT))
    return r.to_wire()


@pytest.fixture
def healthy() -> Iterator[ScriptedServer]:
    with scripted(lambda q: [authoritative(q)]) as s:
        yield s


def test_tc_then_stalling_nameserver_costs_only_its_own_series(
    tmp_path: Path, healthy: ScriptedServer
) -> None:
    """The slow nameserver answers the SOA over UDP late and truncated, then accepts over
    TCP and never answers. Its queries once had the zone timeout each (UDP, then TCP again): past
    the scrape deadline, the collector was cancelled whole and the healthy nameserver's
    series vanished with it. The scrape's budget here (3 s) is more than the zone timeout
    (2 s) and less than the UDP delay plus a TCP timeout (3.5 s)."""

    def late_tc(q: bytes) -> list[bytes]:
        if dns.message.from_wire(q).question[0].rdtype != dns.rdatatype.SOA:
            return [authoritative(q)]
        time.sleep(1.5)
        return [authoritative(q, tc=True)]

    def stall(q: bytes) -> list[bytes]:
        time.sleep(6)
        return []

    with scripted(late_tc, tcp_handler=stall) as slow:
        doc = {
            "zones": [
                {"name": ZONE, "nameservers": [slow.address, healthy.address], "timeout": "2s"}
            ]
        }
        got = samples(asyncio.run(exporter(tmp_path, doc).scrape(3.5)).decode())

    def v(name: str, **labels: str) -> float | None:
        return value(got, name, **labels)

    assert v("dnsfleet_collector_success", collector="zones") == 1
    ok, bad = (
        {"zone": ZONE, "nameserver": healthy.address},
        {"zone": ZONE, "nameserver": slow.address},
    )
    assert v("dnsfleet_zone_nameserver_up", **ok) == 1
    assert v("dnsfleet_zone_soa_serial", **ok) == SERIAL
    # The stalled nameserver's serial is unknown: not consistent (it counts toward drift).
    assert v("dnsfleet_zone_serial_consistent", zone=ZONE) == 0
    assert v("dnsfleet_zone_nameserver_up", **bad) == 0
    assert v("dnsfleet_zone_nameserver_failure_reason", reason="timeout", **bad) == 1
    failing = {dict(lab)["nameserver"] for n, lab in got if n.endswith("_failure_reason")}
    assert failing == {slow.address}


def test_zone_sockets_stay_inside_the_open_file_budget(
    tmp_path: Path, healthy: ScriptedServer
) -> None:
    """600 silent zones, then a healthy one, under `ulimit -n 512` (soft and hard, so the
    exporter cannot raise it): every zone socket once opened at the same time, the healthy
    zone's last, which failed with EMFILE and read as down."""
    hole = Blackhole()
    try:
        zones = [
            {"name": f"silent{i}.test", "nameservers": [hole.address], "timeout": "250ms"}
            for i in range(600)
        ]
        zones.append({"name": ZONE, "nameservers": [healthy.address]})
        conf = tmp_path / "dnsfleet.yml"
        conf.write_text(
            yaml.safe_dump(
                {
                    "resolv_conf": [],
                    "zones": zones,
                    "limits": {"default_scrape_timeout": "60s"},
                }
            )
        )
        out = subprocess.run(
            [
                "bash",
                "-c",
                'ulimit -n 512 && exec "$@"',
                "exporter",
                *EXPORTER,
                f"--config.file={conf}",
                "--once",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    finally:
        hole.close()
    got = samples(out.stdout)
    assert value(got, "dnsfleet_collector_success", collector="zones") == 1
    ok = {"zone": ZONE, "nameserver": healthy.address}
    assert value(got, "dnsfleet_zone_nameserver_up", **ok) == 1, out.stderr[-2000:]
    assert value(got, "dnsfleet_zone_soa_serial", **ok) == SERIAL
    silent = {"zone": "silent7.test.", "nameserver": hole.address}
    assert value(got, "dnsfleet_zone_nameserver_failure_reason", reason="timeout", **silent) == 1
