"""Real Prometheus and Alertmanager (Debian binaries) on free loopback ports, a webhook
receiver that records every notification with its arrival time, and the test copies of the
shipped configurations (alerts/rules, alerts/alertmanager.yml, compose/prometheus) with
only ports, paths and durations changed."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Self

import yaml

from tests.harness.process import Daemon, HttpOk, ManagedProcess
from tests.harness.tools import binary, free_port

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "alerts" / "rules"
ALERTMANAGER_YML = ROOT / "alerts" / "alertmanager.yml"
PROMETHEUS_YML = ROOT / "compose" / "prometheus" / "prometheus.yml"


def http_get(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_post(url: str, body: Any, timeout: float = 10) -> int:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return int(resp.status)


@dataclass
class _Daemon(Daemon):
    """A Prometheus-family daemon on loopback: its YAML config written to ``workdir``,
    started on one managed process, ready when ``/-/ready`` answers."""

    config: dict[str, Any] = field(default_factory=dict)
    port: int = 0
    name: ClassVar[str] = ""  # the config and log file stem
    stop_timeout: ClassVar[float] = 15

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, cfg: Path) -> list[str]:
        raise NotImplementedError

    def start(self) -> Self:
        self.port = self.port or free_port()
        cfg = self.workdir / f"{self.name}.yml"
        cfg.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.managed = ManagedProcess(
            self.command(cfg), self.workdir / f"{self.name}.log", what=self.name
        )
        self.managed.wait_until(HttpOk(self.url + "/-/ready"), timeout=30)
        return self


@dataclass
class Prometheus(_Daemon):
    name: ClassVar[str] = "prometheus"
    # Another build than Debian's (Prometheus 3: tests/harness/gotools.py).
    program: str = ""

    def command(self, cfg: Path) -> list[str]:
        return [
            self.program or binary("prometheus"),
            f"--config.file={cfg}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            # Send a firing alert again soon after Alertmanager restarts or a test starts
            # late; the default 1m resend delay is production's business.
            "--rules.alert.resend-delay=1s",
            "--log.level=warn",
        ]

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        body = http_get(f"{self.url}/api/v1/query?{q}")
        if body.get("status") != "success":
            raise AssertionError(f"query {expr!r} failed: {body}")
        return list(body["data"]["result"])

    def query_names(self) -> list[str]:
        """Every metric name Prometheus holds a series of."""
        return list(http_get(f"{self.url}/api/v1/label/__name__/values")["data"])

    def query_range(self, expr: str, *, seconds: float, step: float) -> dict[str, Any]:
        now = time.time()
        q = urllib.parse.urlencode(
            {"query": expr, "start": now - seconds, "end": now, "step": step}
        )
        return dict(http_get(f"{self.url}/api/v1/query_range?{q}"))

    def wait(self, expr: str, *, timeout: float, what: str = "") -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"no data for {expr!r} within {timeout}s {what}")


@dataclass
class Alertmanager(_Daemon):
    name: ClassVar[str] = "alertmanager"

    def command(self, cfg: Path) -> list[str]:
        return [
            binary("prometheus-alertmanager"),
            f"--config.file={cfg}",
            f"--storage.path={self.workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]

    def post(self, alerts: list[dict[str, Any]]) -> None:
        assert http_post(self.url + "/api/v2/alerts", alerts) == 200

    def alerts(self) -> list[dict[str, Any]]:
        return list(http_get(self.url + "/api/v2/alerts"))


@dataclass(frozen=True)
class Notification:
    received: float  # time.time() on arrival
    receiver: str  # the URL path: pager, ticket, heartbeat
    body: dict[str, Any]

    def alerts(self, status: str = "firing") -> list[dict[str, Any]]:
        return [a for a in self.body.get("alerts", []) if a.get("status") == status]


@dataclass
class Webhook:
    """Alertmanager's webhook receiver: records each POST and the time it arrived."""

    port: int = 0
    notifications: list[Notification] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Webhook:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                with hook._lock:
                    hook.notifications.append(Notification(time.time(), self.path.strip("/"), body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port or free_port()), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def firing(self, receiver: str | None = None) -> list[tuple[float, str, dict[str, Any]]]:
        """(arrival, receiver, alert) for every firing alert delivered so far."""
        with self._lock:
            got = list(self.notifications)
        return [
            (n.received, n.receiver, a)
            for n in got
            if receiver is None or n.receiver == receiver
            for a in n.alerts()
        ]

    def wait_for(
        self, *, timeout: float, receiver: str | None = None, **labels: str
    ) -> tuple[float, str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for hit in self.firing(receiver):
                if all(hit[2]["labels"].get(k) == v for k, v in labels.items()):
                    return hit
            time.sleep(0.1)
        seen = sorted(
            {
                (r, a["labels"].get("alertname", "?"), a["labels"].get("severity", ""))
                for _, r, a in self.firing()
            }
        )
        raise AssertionError(
            f"no notification {labels} to {receiver} in {timeout}s; delivered: {seen}"
        )


# ---------------------------------------------------------------- test copies of the configs

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text: str) -> float:
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"not a simple duration: {text!r}")
    return int(m.group(1)) * _UNIT[m.group(2)]


def scaled_rules(
    dest: Path,
    divisor: int,
    source: Path = RULES_DIR,
    floors: dict[str, int] | None = None,
) -> list[Path]:
    """Copies of alerts/rules/*.yml (or ``source``/*.yml) whose `for` and `keep_firing_for`
    are divided by ``divisor`` (at least 1s, or ``floors[alertname]`` seconds);
    expressions, labels and annotations are untouched."""
    floors = floors or {}
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for src in sorted(source.glob("*.yml")):
        doc = yaml.safe_load(src.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                least = floors.get(rule.get("alert", ""), 1)
                for key in ("for", "keep_firing_for"):
                    if key in rule:
                        rule[key] = f"{max(least, round(seconds(rule[key]) / divisor))}s"
        path = dest / src.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(path)
    return out


def alertmanager_config(
    webhook: Webhook, *, group_wait: str = "1s", group_interval: str = "2s"
) -> dict[str, Any]:
    """alerts/alertmanager.yml with the receivers' relay replaced by ``webhook`` and the
    root route's group_wait/group_interval shortened; routes and inhibitions unchanged."""
    cfg: dict[str, Any] = yaml.safe_load(ALERTMANAGER_YML.read_text())
    for rcv in cfg["receivers"]:
        for hook in rcv.get("webhook_configs", []):
            path = urllib.parse.urlsplit(hook["url"]).path
            hook["url"] = webhook.base + path
    cfg["route"]["group_wait"] = group_wait
    cfg["route"]["group_interval"] = group_interval
    return cfg


def prometheus_config(
    *,
    rule_files: list[Path],
    targets_file: Path,
    alertmanager_port: int | None,
    scrape_interval: str = "2s",
    evaluation_interval: str = "1s",
) -> dict[str, Any]:
    """compose/prometheus/prometheus.yml with the intervals shortened, the dnsfleet job's
    file_sd pointed at ``targets_file`` and Alertmanager at ``alertmanager_port``; the
    relabeling and job options are the shipped ones."""
    cfg: dict[str, Any] = yaml.safe_load(PROMETHEUS_YML.read_text())
    cfg["global"]["scrape_interval"] = scrape_interval
    cfg["global"]["scrape_timeout"] = scrape_interval
    cfg["global"]["evaluation_interval"] = evaluation_interval
    cfg["rule_files"] = [str(p) for p in rule_files]
    if alertmanager_port is None:
        cfg.pop("alerting", None)
    else:
        cfg["alerting"]["alertmanagers"] = [
            {"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}
        ]
    jobs = [j for j in cfg["scrape_configs"] if j["job_name"] == "dnsfleet"]
    assert jobs, "compose/prometheus/prometheus.yml has no job dnsfleet"
    job = jobs[0]
    job["file_sd_configs"] = [{"files": [str(targets_file)], "refresh_interval": "1s"}]
    cfg["scrape_configs"] = [job]
    return cfg
