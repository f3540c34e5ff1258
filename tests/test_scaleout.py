"""Scale-out: /probe targets sharded across exporter replicas with hashmod
(compose/prometheus/examples/sharded.yml, relabeling unchanged), two real exporters behind
one real Prometheus. Each replica asks a different query name, and every target is a DNS
peer that records the names it was asked: a target probed by both replicas would have
seen both names. Prometheus's own hashmod is recomputed here (md5, last 8 bytes, mod N) to
check the assignment is the documented one."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import dns.message
import pytest
import yaml

from tests.harness.exporter import ExporterProcess
from tests.harness.monitoring import Prometheus
from tests.harness.servers import ScriptedServer, answer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
SHARDED = ROOT / "compose" / "prometheus" / "examples" / "sharded.yml"
REPLICAS = 2


def hashmod(value: str, modulus: int) -> int:
    # prometheus/model/relabel: sum64(md5(value)) keeps the low 64 bits of the digest.
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus


class Recorder:
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.server = ScriptedServer(self.handle)

    def handle(self, wire: bytes) -> list[bytes]:
        q = dns.message.from_wire(wire)
        name = q.question[0].name.to_text()
        self.names.add(name)
        return [answer(wire, f"{name} 60 IN A 192.0.2.1")]


@pytest.fixture
def recorders() -> Iterator[list[Recorder]]:
    with ExitStack() as stack:
        recs: list[Recorder] = []
        # Enough targets that both replicas get at least two (ports are random).
        while (
            len(recs) < 8
            or min(
                sum(1 for r in recs if hashmod(r.server.address, REPLICAS) == i)
                for i in range(REPLICAS)
            )
            < 2
        ):
            r = Recorder()
            stack.callback(r.server.close)
            recs.append(r)
            assert len(recs) < 40
        yield recs


def test_each_target_is_probed_by_exactly_one_replica(
    tmp_path: Path, recorders: list[Recorder]
) -> None:
    exporters: list[ExporterProcess] = []
    prom: Prometheus | None = None
    try:
        for i in range(REPLICAS):
            cfg = tmp_path / f"replica{i}.yml"
            cfg.write_text(
                yaml.safe_dump(
                    {
                        "modules": {
                            "recursive": {
                                "query_name": f"r{i}.shard.test",
                                "query_type": "A",
                                "timeout": "500ms",
                            }
                        },
                        "targets": [],
                        "probe_allowlist": ["127.0.0.0/8"],
                        "resolv_conf": [],
                    }
                )
            )
            (tmp_path / f"r{i}").mkdir()
            exporters.append(ExporterProcess(f"--config.file={cfg}", cwd=tmp_path / f"r{i}"))

        targets = tmp_path / "resolvers.yml"
        targets.write_text(
            yaml.safe_dump(
                [{"targets": [r.server.address for r in recorders], "labels": {"site": "lab"}}]
            )
        )
        config = yaml.safe_load(SHARDED.read_text())
        config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
        (job,) = config["scrape_configs"]
        job["file_sd_configs"] = [{"files": [str(targets)], "refresh_interval": "1s"}]
        replacements = [
            r for r in job["relabel_configs"] if r.get("source_labels") == ["__tmp_shard"]
        ]
        assert [r["regex"] for r in replacements] == ["0", "1"]
        for r in replacements:
            r["replacement"] = f"127.0.0.1:{exporters[int(r['regex'])].port}"
        (tmp_path / "prom").mkdir()
        prom = Prometheus(tmp_path / "prom", config).start()

        # Three rounds of scrapes of every target.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = prom.query(
                'count_over_time(dnsfleet_probe_success{job="dnsfleet-probe"}[1m]) >= 3'
            )
            if len(got) >= len(recorders):
                break
            time.sleep(0.5)
        series = prom.query('dnsfleet_probe_success{job="dnsfleet-probe"}')
    finally:
        if prom is not None:
            prom.stop()
        for e in exporters:
            e.stop()

    by_target: dict[str, set[str]] = {}
    for s in series:
        by_target.setdefault(s["metric"]["target"], set()).add(s["metric"]["exporter"])
        assert s["value"][1] == "1", s
    per_replica = [0] * REPLICAS
    for r in recorders:
        addr = r.server.address
        shard = hashmod(addr, REPLICAS)
        per_replica[shard] += 1
        # Seen from the DNS side: only the query name of the expected replica.
        assert r.names == {f"r{shard}.shard.test."}, (addr, r.names)
        # Seen from Prometheus: one series, scraped through that replica.
        assert by_target.get(addr) == {f"127.0.0.1:{exporters[shard].port}"}, (
            addr,
            by_target.get(addr),
        )
    assert min(per_replica) >= 2, per_replica
