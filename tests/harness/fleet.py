"""The fleet path: exporter replicas each probing the hashmod share of a many-target fleet,
Prometheus agents that scrape the replicas (sharded among themselves with hashmod too) and
remote-write to a central store, Prometheus with its remote-write receiver or
VictoriaMetrics single-node, and vmalert evaluating the rules on VictoriaMetrics.

The targets are loopback addresses on one port: many served by one unbound, a few by
ScriptedServers that fail a share of their queries, and some by nobody (the kernel refuses:
a resolver whose process is gone)."""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from tests.harness import gotools
from tests.harness.monitoring import Prometheus, http_get
from tests.harness.process import Daemon, HttpOk, ManagedProcess
from tests.harness.servers import ScriptedServer, answer
from tests.harness.tools import binary, free_port

QNAME = "a.local.test"


def hashmod(value: str, modulus: int) -> int:
    """Prometheus's ``hashmod`` relabel action: the low 64 bits of md5(value) mod N
    (prometheus/model/relabel), so a target's shard is the same here as in a relabel rule."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus


def addresses(net: int, n: int) -> list[str]:
    """n distinct loopback addresses in 127.<net>.0.0/16 (no .0 or .255 host byte)."""
    assert n <= 254 * 256
    return [f"127.{net}.{i // 254}.{1 + i % 254}" for i in range(n)]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m, pid
    return int(m.group(1)) * 1024


def scraped_value(url: str, name: str) -> float:
    """Sum of a family's samples on a /metrics page (an agent serves no query API)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


class Burner:
    """A resolver that refuses 1 of every 6 queries."""

    def __init__(self, host: str, port: int) -> None:
        self.n = 0
        self.server = ScriptedServer(self.handle, host=host, port=port)

    def handle(self, wire: bytes) -> list[bytes]:
        self.n += 1
        if self.n % 6 == 0:
            return [answer(wire, rcode=5)]
        return [answer(wire, f"{QNAME}. 60 IN A 192.0.2.1")]


def exporter_config(path: Path, targets: list[tuple[str, str]]) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "modules": {"fleet": {"query_name": QNAME, "query_type": "A", "timeout": "2s"}},
                "targets": [
                    {"address": a, "module": "fleet", "labels": {"site": s}} for a, s in targets
                ],
                "resolv_conf": [],
            }
        )
    )


@dataclass
class PrometheusAgent(Prometheus):
    """Prometheus in agent mode (Debian's 2.x: ``--enable-feature=agent``): scrapes and
    remote-writes, keeps only a write-ahead log, evaluates no rules and answers no query."""

    name: ClassVar[str] = "agent"

    def command(self, cfg: Path) -> list[str]:
        return [
            self.program or binary("prometheus"),
            "--enable-feature=agent",
            f"--config.file={cfg}",
            f"--storage.agent.path={self.workdir / 'wal'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]


@dataclass
class PrometheusReceiver(Prometheus):
    """The central Prometheus: the agents' samples arrive on /api/v1/write; it evaluates
    the rules over every shard."""

    def command(self, cfg: Path) -> list[str]:
        return [*super().command(cfg), "--web.enable-remote-write-receiver"]


@dataclass
class VictoriaMetrics(Daemon):
    """VictoriaMetrics single-node built from the Go module proxy (gotools)."""

    port: int = 0
    stop_timeout: ClassVar[float] = 15

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VictoriaMetrics:
        self.port = self.port or free_port()
        self.managed = ManagedProcess(
            [
                gotools.victoria_metrics(),
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.workdir / 'data'}",
                "-retentionPeriod=1d",
                # Samples are queryable at once, not 30 s later (the default offset hides
                # the newest samples, which a scaled-down rule window needs).
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-loggerLevel=ERROR",
            ],
            self.workdir / "victoria-metrics.log",
            what="victoria-metrics",
        )
        self.managed.wait_until(HttpOk(self.url + "/health"), timeout=30)
        return self

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        body = http_get(f"{self.url}/api/v1/query?{q}")
        assert body.get("status") == "success", body
        return list(body["data"]["result"])


@dataclass
class VmAlert(Daemon):
    """vmalert evaluating rule files against VictoriaMetrics, writing its ALERTS and
    recording rules' series back there (the rules read ALERTS and recorded series)."""

    rule_files: tuple[Path, ...] = ()
    datasource: str = ""
    interval: str = "1s"
    port: int = 0
    stop_timeout: ClassVar[float] = 15

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> VmAlert:
        self.port = self.port or free_port()
        self.managed = ManagedProcess(
            [
                gotools.vmalert(),
                *(f"-rule={p}" for p in self.rule_files),
                f"-datasource.url={self.datasource}",
                f"-remoteWrite.url={self.datasource}",
                f"-remoteRead.url={self.datasource}",
                "-remoteWrite.flushInterval=1s",
                "-notifier.blackhole",
                f"-evaluationInterval={self.interval}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-loggerLevel=ERROR",
            ],
            self.workdir / "vmalert.log",
            what="vmalert",
        )
        self.managed.wait_until(HttpOk(self.url + "/health"), timeout=30)
        return self

    def firing(self) -> list[dict[str, Any]]:
        """The firing alerts, as Prometheus's /api/v1/alerts lists them."""
        body = http_get(f"{self.url}/api/v1/alerts")
        return [a for a in body["data"]["alerts"] if a["state"] == "firing"]
