"""The exporter as a process: endpoints, reloads, timeouts, --once and --config.check."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet import config as config_mod
from tests.harness.exporter import ExporterProcess
from tests.harness.metrics import promtool_check, value
from tests.harness.servers import Blackhole, Named, Unbound
from tests.harness.tools import free_port

pytestmark = pytest.mark.integration

# resolv_conf: [] — the stub collector must never probe this machine's own resolver.
MODULES = """
resolv_conf: []
modules:
  www:
    query_name: www.example.test
    query_type: A
    min_answers: 1
  slow:
    query_name: www.example.test
    query_type: A
    timeout: 5s
  open:
    query_name: www.example.test
    query_type: A
    allow_query_override: true
"""


@pytest.fixture
def config(tmp_path: Path, unbound: Unbound, blackhole: Blackhole) -> Path:
    closed = free_port()
    p = tmp_path / "dnsfleet.yml"
    p.write_text(
        MODULES
        + f"""
targets:
  - {{address: "{unbound.address}", module: www, labels: {{site: lab1}}}}
  - {{address: "127.0.0.1:{closed}", module: www, labels: {{site: lab1}}}}
  - {{address: "{blackhole.address}", module: slow}}
probe_allowlist: ["127.0.0.0/8"]
"""
    )
    return p


@pytest.fixture
def exporter(config: Path, tmp_path: Path) -> Iterator[ExporterProcess]:
    e = ExporterProcess(f"--config.file={config}", "--web.enable-lifecycle", cwd=tmp_path)
    yield e
    e.stop()


def test_metrics_carry_results_and_labels(
    exporter: ExporterProcess, unbound: Unbound, blackhole: Blackhole
) -> None:
    text = exporter.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "2"})
    good = {"target": unbound.address, "module": "www", "site": "lab1"}
    assert value(text, "dnsfleet_probe_success", **good) == 1
    assert value(text, "dnsfleet_probe_dns_rcode", **good) == 0
    assert value(text, "dnsfleet_probe_answer_rrs", **good) == 1
    assert value(text, "dnsfleet_probe_failure", **good, reason="timeout") is None
    hole = {"target": blackhole.address, "module": "slow"}
    assert value(text, "dnsfleet_probe_success", **hole) == 0
    assert value(text, "dnsfleet_probe_failure", **hole, reason="timeout") == 1
    assert value(text, "dnsfleet_probe_dns_rcode", **hole) == -1
    # The 5 s module timeout is capped by the scrape timeout header minus the offset.
    duration = value(text, "dnsfleet_probe_duration_seconds", **hole)
    assert duration is not None and duration <= 1.6
    assert value(text, "dnsfleet_config_last_reload_successful") == 1
    assert value(text, "dnsfleet_targets") == 3


def test_counters_accumulate_across_scrapes(
    exporter: ExporterProcess, config: Path, unbound: Unbound
) -> None:
    hdr = {"X-Prometheus-Scrape-Timeout-Seconds": "1"}
    for _ in range(3):
        text = exporter.get("/metrics", headers=hdr)
    closed = next(
        t.address
        for t in config_mod.load(config).targets
        if t.address not in (unbound.address,) and t.module == "www"
    )
    assert (
        value(
            text,
            "dnsfleet_probe_failures_total",
            target=closed,
            module="www",
            site="lab1",
            reason="refused",
        )
        == 3
    )
    good = {"target": unbound.address, "module": "www", "site": "lab1"}
    assert value(text, "dnsfleet_probe_latency_seconds_count", **good) == 3
    # No series for a reason the target never failed with (an absent failure counts 0).
    assert value(text, "dnsfleet_probe_failures_total", **good, reason="timeout") is None


def test_exposition_passes_promtool(exporter: ExporterProcess, tmp_path: Path) -> None:
    text = exporter.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "1"})
    out = promtool_check(text)
    assert out.returncode == 0, out.stdout + out.stderr


def test_probe_endpoint(exporter: ExporterProcess, unbound: Unbound) -> None:
    text = exporter.get(f"/probe?target={unbound.address}&module=www")
    assert value(text, "dnsfleet_probe_success") == 1
    assert "dnsfleet_probe_failure{" not in text  # no failure, no series
    assert 'target="' not in text
    # A configured target needs no module parameter.
    assert value(exporter.get(f"/probe?target={unbound.address}"), "dnsfleet_probe_success") == 1
    # Inside the allowlist but not configured: allowed with an explicit module.
    text = exporter.get(f"/probe?target=127.0.0.1:{free_port()}&module=www")
    assert value(text, "dnsfleet_probe_failure", reason="refused") == 1


@pytest.mark.parametrize(
    ("query", "status", "needle"),
    [
        ("", 400, "missing parameter: target"),
        ("target=127.0.0.1:5", 400, "missing parameter: module"),
        ("target=127.0.0.1:5&module=nope", 400, "unknown module"),
        ("target=dns.example.test&module=www", 400, "not an IP address"),
        ("target=192.0.2.1&module=www", 403, "neither configured nor inside probe_allowlist"),
        ("target=127.0.0.1:5&module=www&name=evil.test", 403, "does not allow overriding"),
    ],
)
def test_probe_rejects(exporter: ExporterProcess, query: str, status: int, needle: str) -> None:
    code, body = exporter.request(f"/probe?{query}")
    assert code == status and needle in body, body


def test_probe_query_override_when_allowed(exporter: ExporterProcess, unbound: Unbound) -> None:
    text = exporter.get(f"/probe?target={unbound.address}&module=open&name=a.local.test&type=a")
    assert value(text, "dnsfleet_probe_success") == 1
    assert value(text, "dnsfleet_probe_answer_rrs") == 1


def test_health_ready_config_and_status_page(exporter: ExporterProcess, unbound: Unbound) -> None:
    assert exporter.get("/-/healthy") == "OK\n"
    assert exporter.get("/-/ready") == "Ready\n"
    assert "www.example.test" in exporter.get("/config")
    exporter.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "1"})
    page = exporter.get("/")
    assert unbound.address in page and "FAIL: refused" in page and "FAIL: timeout" in page
    assert "2 failing" in page


def test_bad_reload_keeps_old_config(
    exporter: ExporterProcess, config: Path, unbound: Unbound
) -> None:
    good = config.read_text()
    config.write_text(good + "\nbogus_key: 1\n")
    code, body = exporter.request("/-/reload", method="POST")
    assert code == 500 and "bogus_key: unknown key" in body
    text = exporter.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "1"})
    assert value(text, "dnsfleet_config_last_reload_successful") == 0
    assert (
        value(text, "dnsfleet_probe_success", target=unbound.address, module="www", site="lab1")
        == 1
    )
    assert "Last reload FAILED" in exporter.get("/")
    # SIGHUP with a fixed file: one target left, reload flag back to 1.
    config.write_text(MODULES + f'targets:\n  - {{address: "{unbound.address}", module: www}}\n')
    exporter.hup()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = exporter.get("/metrics", headers={"X-Prometheus-Scrape-Timeout-Seconds": "1"})
        # A scrape already under way when the reload landed reports the old targets.
        if (
            value(text, "dnsfleet_config_last_reload_successful") == 1
            and value(text, "dnsfleet_targets") == 1
        ):
            break
        time.sleep(0.1)
    assert value(text, "dnsfleet_targets") == 1
    assert value(text, "dnsfleet_probe_success", target=unbound.address, module="www") == 1


def test_config_check_exit_codes(config: Path, tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "dnsfleet", f"--config.file={config}", "--config.check"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok.returncode == 0 and "configuration valid" in ok.stdout
    bad = tmp_path / "bad.yml"
    bad.write_text("modules:\n  m:\n    timeout: fast\n")
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet", f"--config.file={bad}", "--config.check"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert f'{bad}:3:14: modules.m.timeout: invalid duration "fast"' in out.stderr


def test_once_with_builtin_default_reads_rootfs_resolv_conf(tmp_path: Path, named: Named) -> None:
    # A fake root whose resolv.conf names loopback addresses only, where nothing listens
    # on port 53 (other tests may run resolvers on 127.0.0.1:53 meanwhile), so both are
    # refused; never the host's own resolver.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "resolv.conf").write_text(
        "# test\nnameserver 127.83.0.9\nnameserver 127.83.0.1\noptions timeout:1\n"
    )
    listening = subprocess.run(["ss", "-Hlnu", "sport = :53"], capture_output=True, text=True)
    if any(a in listening.stdout for a in ("127.83.0.9:53", "127.83.0.1:53", "*:53", "0.0.0.0:53")):
        pytest.skip("something listens on port 53 of every address here")
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet", "--once", f"--path.rootfs={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    for ns in ("127.83.0.9", "127.83.0.1"):
        assert (
            value(
                out.stdout,
                "dnsfleet_probe_failure",
                target=ns,
                module="recursive",
                reason="refused",
            )
            == 1
        )


def test_non_ascii_content_length_is_a_400(exporter: ExporterProcess) -> None:
    """str.isdigit() is true for '²'; int() is not: the server must answer, not fail."""
    import socket as _socket

    with _socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as s:
        # 0xB2 is '²' in latin-1, the encoding HTTP heads are read in.
        s.sendall(b"POST /-/reload HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n")
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400 "), reply
