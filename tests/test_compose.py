"""Every file compose/docker-compose.yml mounts or builds from is validated with the tool
that will read it (no Docker engine here): promtool for Prometheus, amtool for
Alertmanager, unbound-checkconf, `dnsfleet-exporter --config.check`, the Grafana
provisioning and dashboards by structure, the compose file itself by structure."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet.cli import exporter_parser
from tests.harness.tools import binary

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_DIR = ROOT / "compose"
COMPOSE = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def mounts(service: str) -> dict[str, Path]:
    """container path -> host path (resolved), for bind mounts of a service."""
    out = {}
    for v in SERVICES[service].get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith((".", "/")) and src != "/":
            out[dst] = (COMPOSE_DIR / src).resolve()
    return out


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)


@pytest.mark.unit
def test_services() -> None:
    assert set(SERVICES) >= {
        "exporter",
        "unbound",
        "consul",
        "prometheus",
        "alertmanager",
        "grafana",
    }
    for name, svc in SERVICES.items():
        assert svc.get("network_mode") == "host", name


@pytest.mark.unit
def test_exporter_service_sees_the_host() -> None:
    """The host's network, and read-only only what the collectors read: /proc, /sys and
    resolv.conf. No host PID namespace: /host/proc is the host's procfs, which lists the
    host's processes whatever the container's PID namespace (tests/test_kubernetes.py
    runs the collectors so)."""
    ex = SERVICES["exporter"]
    assert ex["build"]["dockerfile"] == "exporter/Dockerfile"
    assert (COMPOSE_DIR / ex["build"]["context"] / ex["build"]["dockerfile"]).is_file()
    assert "pid" not in ex and ex["network_mode"] == "host"
    host = sorted(v for v in ex["volumes"] if v.startswith("/"))
    assert host == [
        "/etc/resolv.conf:/host/etc/resolv.conf:ro",
        "/proc:/host/proc:ro",
        "/sys:/host/sys:ro",
    ]
    args = exporter_parser().parse_args(ex["command"])
    assert args.rootfs == "/host"
    assert args.procfs == "/host/proc" and args.sysfs == "/host/sys"


@pytest.mark.unit
def test_least_privilege() -> None:
    """The image runs as a fixed non-root uid, and so does the compose exporter (host
    collectors included), with no capabilities, a read-only root and no privilege
    escalation. The PM QoS override runs it as uid 0, the device's owner, still with no
    capabilities, and lets its device cgroup open that one device read-only."""
    text = (ROOT / "exporter" / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    users = re.findall(r"^USER (\S+)", final, re.MULTILINE)
    assert users == ["10001:10001"], users
    assert "useradd --system --uid 10001" in final
    ex = SERVICES["exporter"]
    assert ex["user"] == "10001:10001"
    assert ex["cap_drop"] == ["ALL"] and "cap_add" not in ex
    assert ex["read_only"] is True
    assert "no-new-privileges:true" in ex["security_opt"]
    assert not ex.get("privileged")
    # Everything the container may write is nothing: the host is mounted read-only.
    assert all(v.endswith(":ro") or ":ro," in v for v in ex["volumes"])
    pm_qos = yaml.safe_load((COMPOSE_DIR / "docker-compose.pm-qos.yml").read_text())
    over = pm_qos["services"]["exporter"]
    assert over["user"] == "0:0" and over["cap_drop"] == ["ALL"] and "cap_add" not in over
    assert over["devices"] == ["/dev/cpu_dma_latency:/dev/cpu_dma_latency:r"]
    # ... read where the exporter looks for it: under --path.rootfs.
    assert over["volumes"] == ["/dev/cpu_dma_latency:/host/dev/cpu_dma_latency:ro"]


@pytest.mark.unit
def test_dockerfile_default_command_is_valid() -> None:
    text = (ROOT / "exporter" / "Dockerfile").read_text().replace("\\\n", " ")
    cmd = next(line for line in text.splitlines() if line.startswith("CMD "))
    args = exporter_parser().parse_args(json.loads(cmd.removeprefix("CMD ")))
    assert args.rootfs == "/host"
    assert 'ENTRYPOINT ["dnsfleet-exporter"]' in text


@pytest.mark.unit
def test_every_bind_mount_exists() -> None:
    for name in SERVICES:
        for dst, src in mounts(name).items():
            assert src.exists(), f"{name}: {src} (mounted at {dst}) is missing"


@pytest.mark.unit
def test_consul_is_a_loopback_server_not_a_dev_agent() -> None:
    c = SERVICES["consul"]
    assert c["image"].startswith("hashicorp/consul")
    assert c["command"][:2] == ["agent", "-server"] and "-dev" not in c["command"]
    assert not [a for a in c["command"] if a.startswith(("-client", "-bind"))]  # agent.hcl
    hcl = (COMPOSE_DIR / "consul" / "agent.hcl").read_text()
    assert re.search(r'^bind_addr\s*=\s*"127\.0\.0\.1"$', hcl, re.M)
    assert re.search(r'^client_addr\s*=\s*"127\.0\.0\.1"$', hcl, re.M)
    assert "consul-data:/consul/data" in c["volumes"]


def listeners() -> dict[str, list[str]]:
    """service -> the host:port (or host and port) it listens on, from its flags and files."""
    s = SERVICES
    out: dict[str, list[str]] = {}
    for name in ("exporter", "prometheus", "alertmanager"):
        out[name] = [
            a.split("=", 1)[1] for a in s[name]["command"] if a.startswith("--web.listen-address=")
        ]
    out["alertmanager"].append(  # cluster gossip off
        next(a for a in s["alertmanager"]["command"] if a.startswith("--cluster.listen-address"))
    )
    env = s["grafana"]["environment"]
    out["grafana"] = [f"{env['GF_SERVER_HTTP_ADDR']}:{env['GF_SERVER_HTTP_PORT']}"]
    conf = (COMPOSE_DIR / "unbound" / "unbound.conf").read_text()
    host = re.findall(r"^\s*interface:\s*(\S+)", conf, re.M)
    port = re.findall(r"^\s*port:\s*(\d+)", conf, re.M)
    ctl = re.findall(r"^\s*control-interface:\s*(\S+)", conf, re.M)
    ctl_port = re.findall(r"^\s*control-port:\s*(\d+)", conf, re.M)
    out["unbound"] = [f"{host[0]}:{port[0]}", f"{ctl[0]}:{ctl_port[0]}"]
    hcl = (COMPOSE_DIR / "consul" / "agent.hcl").read_text()
    ports = dict(re.findall(r"^\s*(\w+)\s*=\s*(-?\d+)$", hcl, re.M))
    out["consul"] = [f"127.0.0.1:{p}" for p in ports.values() if p != "-1"]
    return out


# Ports something else on a workstation or resolver host commonly holds: DNS, mDNS,
# Prometheus and its usual exporters and Alertmanager, Grafana, a Consul agent, unbound's
# control port, dev web servers.
COMMON_PORTS = {
    53,
    80,
    443,
    3000,
    5353,
    8000,
    8080,
    8300,
    8301,
    8302,
    8500,
    8501,
    8502,
    8600,
    8953,
    9090,
    9091,
    9093,
    9094,
    9100,
    9115,
    9119,
    9153,
}


@pytest.mark.unit
def test_listens_on_loopback_only_and_on_uncommon_ports() -> None:
    got = listeners()
    assert set(got) == {"exporter", "prometheus", "alertmanager", "grafana", "unbound", "consul"}
    assert got["alertmanager"].pop() == "--cluster.listen-address="
    ports = []
    for service, addrs in got.items():
        for addr in addrs:
            host, _, port = addr.rpartition(":")
            assert host == "127.0.0.1", f"{service} listens on {addr}"
            ports.append(int(port))
    assert not set(ports) & COMMON_PORTS, sorted(set(ports) & COMMON_PORTS)
    assert len(ports) == len(set(ports))
    # What the services reach each other on is what they listen on.
    cfg = yaml.safe_load(mounts("exporter")["/etc/dnsfleet/dnsfleet.yml"].read_text())
    assert cfg["targets"][0]["address"] == got["unbound"][0]
    assert cfg["targets"][0]["stats"]["control"] == "tcp://" + got["unbound"][1]
    (agent,) = cfg["consul"]["agents"]
    assert agent["dns_address"] in got["consul"]
    assert agent["http_address"].removeprefix("http://") in got["consul"]
    assert "127.0.0.1:" + agent["http_address"].rsplit(":", 1)[1] in " ".join(
        SERVICES["consul-demo-query"]["command"]
    )
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus" / "prometheus.yml").read_text())
    (am,) = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == got["alertmanager"][0]


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace)")
def test_the_same_configs_run_natively() -> None:
    """`make stack` (tests/stack.py: the compose files with the Debian daemons and the Consul
    double), in a network namespace of its own so its fixed ports cannot meet another run's,
    until Prometheus has scraped the exporter's probes of unbound and Consul."""
    out = subprocess.run(
        [
            "unshare",
            "--net",
            "sh",
            "-c",
            f'ip link set lo up && exec "{sys.executable}" -m tests.stack --check',
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "stack check: " in out.stdout


@pytest.mark.integration
def test_prometheus_config() -> None:
    m = mounts("prometheus")
    cfg = m["/etc/prometheus/prometheus.yml"]
    assert cfg == (COMPOSE_DIR / "prometheus" / "prometheus.yml").resolve()
    assert m["/etc/prometheus/rules"] == (ROOT / "alerts" / "rules").resolve()
    # In the repository compose/prometheus/rules is a symlink to alerts/rules: promtool
    # checks the config with the very rules the container mounts.
    assert (COMPOSE_DIR / "prometheus" / "rules").resolve() == (ROOT / "alerts" / "rules")
    out = run(
        binary("promtool"), "check", "config", str(COMPOSE_DIR / "prometheus" / "prometheus.yml")
    )
    assert out.returncode == 0, out.stdout + out.stderr
    n = len(list((ROOT / "alerts" / "rules").glob("*.rules.yml")))
    assert f"SUCCESS: {n} rule files found" in out.stdout


@pytest.mark.integration
@pytest.mark.parametrize("name", ["file_sd.yml", "sharded.yml"])
def test_prometheus_examples(name: str) -> None:
    out = run(
        binary("promtool"), "check", "config", str(COMPOSE_DIR / "prometheus" / "examples" / name)
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_prometheus_consul_sd_example(tmp_path: Path) -> None:
    """Debian's Prometheus is built without Consul service discovery (promtool rejects
    `consul_sd_configs`); upstream images have it. Check the consul_sd blocks' keys against
    the documented ones, and everything else with promtool, with each consul_sd block
    replaced by an equivalent static one."""
    src = COMPOSE_DIR / "prometheus" / "examples" / "consul_sd.yml"
    cfg = yaml.safe_load(src.read_text())
    documented = {
        "server",
        "services",
        "tags",
        "datacenter",
        "token",
        "scheme",
        "node_meta",
        "allow_stale",
        "refresh_interval",
        "tag_separator",
    }
    for job in cfg["scrape_configs"]:
        for sd in job.pop("consul_sd_configs"):
            assert set(sd) <= documented, sd
            assert sd["server"] == "127.0.0.1:8500"
        job["static_configs"] = [{"targets": ["127.0.0.1:53"]}]
    cfg["rule_files"] = [str(ROOT / "alerts" / "rules" / "*.rules.yml")]
    f = tmp_path / "consul_sd_static.yml"
    f.write_text(yaml.safe_dump(cfg))
    out = run(binary("promtool"), "check", "config", str(f))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_alertmanager_config() -> None:
    m = mounts("alertmanager")
    cfg = m["/etc/alertmanager/alertmanager.yml"]
    assert cfg == (ROOT / "alerts" / "alertmanager.yml").resolve()
    out = run(binary("amtool"), "check-config", str(cfg))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "--cluster.listen-address=" in SERVICES["alertmanager"]["command"]


@pytest.mark.integration
def test_unbound_config() -> None:
    conf = mounts("unbound")["/opt/unbound/etc/unbound/unbound.conf"]
    out = run(binary("unbound-checkconf"), str(conf))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_exporter_config() -> None:
    conf = mounts("exporter")["/etc/dnsfleet/dnsfleet.yml"]
    out = run(sys.executable, "-m", "dnsfleet", f"--config.file={conf}", "--config.check")
    assert out.returncode == 0, out.stdout + out.stderr
    cfg = yaml.safe_load(conf.read_text())
    # The exporter reads statistics over the unbound service's remote control on loopback
    # (TCP: no socket file, so no group of unbound's for the non-root exporter).
    unbound_conf = mounts("unbound")["/opt/unbound/etc/unbound/unbound.conf"].read_text()
    assert cfg["targets"][0]["stats"]["control"].startswith("tcp://127.0.0.1:")
    assert "control-interface: 127.0.0.1" in unbound_conf
    # ... and watches the service and prepared query the Consul service provides.
    assert cfg["consul"]["services"] == ["web"]
    assert 'name = "web"' in (COMPOSE_DIR / "consul" / "demo.hcl").read_text()
    query = json.loads((COMPOSE_DIR / "consul" / "web-nearest.json").read_text())
    assert cfg["consul"]["prepared_queries"] == [query["Name"]]
    assert query["Service"]["Service"] == "web"
    assert "web-nearest.json" in shlex.join(SERVICES["consul-demo-query"]["command"])


@pytest.mark.unit
def test_grafana_provisioning() -> None:
    m = mounts("grafana")
    ds = yaml.safe_load((m["/etc/grafana/provisioning/datasources"] / "prometheus.yml").read_text())
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    listen = next(
        a for a in SERVICES["prometheus"]["command"] if a.startswith("--web.listen-address=")
    )
    assert source["url"] == "http://" + listen.split("=", 1)[1]
    prov = yaml.safe_load((m["/etc/grafana/provisioning/dashboards"] / "dnsfleet.yml").read_text())
    assert prov["apiVersion"] == 1
    (provider,) = prov["providers"]
    assert provider["type"] == "file"
    dash_dir = m[provider["options"]["path"]]
    assert dash_dir == (ROOT / "dashboards" / "json").resolve()
    docs = [json.loads(p.read_text()) for p in sorted(dash_dir.glob("*.json"))]
    assert len(docs) >= 5
    assert len({d["uid"] for d in docs}) == len(docs)
    for d in docs:
        assert d["panels"] and d["title"].startswith("dnsfleet / ")
