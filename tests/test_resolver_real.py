"""Issue 4 with real unbound and BIND: cache flushes, restarts, natural expiry, backend
changes, the remote-control socket (unix and TLS), the statistics channel, and
capacity-test with resperf. Servers that get restarted are this module's own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dnsfleet.app import Exporter
from dnsfleet.cli import main as dnsfleet_main
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.unbound import parse_unbound_stats
from tests.servers import Named, Unbound
from tests.tools import binary, free_port

RECORDS = """www     IN A 192.0.2.10
canary  3600 IN A 192.0.2.11
brief   8 IN A 192.0.2.13
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(exp: Exporter) -> Samples:
    text = asyncio.run(exp.scrape(8.0)).decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    hits = [v for (n, lab), v in samples.items() if n == name and want <= lab]
    assert len(hits) <= 1, f"{name} {labels}: {len(hits)} series"
    return hits[0] if hits else None


def exporter(tmp_path: Path, doc: dict[str, Any]) -> Exporter:
    path = tmp_path / "dnsfleet.yml"
    # Never let the stub collector probe this machine's own resolver.
    path.write_text(yaml.safe_dump({"resolv_conf": [], **doc}))
    return Exporter(fs=HostFS(), config_file=str(path))


def process_start(pid: int) -> float:
    """Process start from /proc/<pid> (its ctime is set when the process is created)."""
    return os.stat(f"/proc/{pid}").st_ctime


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Named, Unbound]]:
    """Our own BIND (authoritative for example.test) and unbound (stub-zone to it), free to
    restart without disturbing the session fixtures."""
    n = Named(tmp_path / "named", zones={"example.test": RECORDS}).start()
    u = Unbound(tmp_path / "unbound", stubs={"example.test.": f"127.0.0.1@{n.port}"},
                extra_server='  nsid: "ascii_backend-a"')
    try:
        u.start()
        yield n, u
    finally:
        u.stop()
        n.stop()


def fleet(named: Named, unbound: Unbound, tmp_path: Path, *, canary: str) -> dict[str, Any]:
    return {
        "modules": {
            "rec": {"query_name": "www.example.test", "query_type": "A", "canary": canary,
                    "canary_tolerance": "1s"},
            "auth": {"query_name": "www.example.test", "query_type": "A",
                     "recursion_desired": False},
        },
        "targets": [
            {"address": unbound.address, "module": "rec", "labels": {"site": "lab1"},
             "stats": {"type": "unbound", "control": f"unix://{unbound.control_socket}"}},
            {"address": named.address, "module": "auth", "labels": {"site": "lab1"},
             "stats": {"type": "bind", "url": named.stats_url}},
        ],
        "resolver": {"capacity_file": str(tmp_path / "capacity.json")},
    }


def test_flush_restart_and_backend_change(pair: tuple[Named, Unbound],
                                          tmp_path: Path) -> None:
    named, unbound = pair
    exp = exporter(tmp_path, fleet(named, unbound, tmp_path, canary="canary.example.test"))
    u, b = unbound.address, named.address
    resets = "dnsfleet_resolver_cache_resets_total"
    start = "dnsfleet_resolver_start_time_seconds"

    s = scrape(exp)
    assert value(s, "dnsfleet_probe_success", target=u) == 1
    assert value(s, resets, target=u, site="lab1") == 0
    assert 3595 <= value(s, "dnsfleet_resolver_canary_ttl_seconds", target=u) <= 3600
    assert value(s, "dnsfleet_resolver_backend_info", target=u, backend="backend-a") == 1
    assert value(s, "dnsfleet_resolver_stats_up", target=u, site="lab1") == 1
    assert value(s, "dnsfleet_resolver_stats_up", target=b) == 1
    assert value(s, "dnsfleet_resolver_info", target=u, software="unbound") == 1
    assert value(s, "dnsfleet_resolver_info", target=b, software="bind") == 1
    u_start, b_start = value(s, start, target=u), value(s, start, target=b)
    assert u_start == pytest.approx(process_start(unbound.proc.pid), abs=2)  # type: ignore[union-attr]
    assert b_start == pytest.approx(process_start(named.proc.pid), abs=2)  # type: ignore[union-attr]
    assert value(s, "dnsfleet_resolver_queries_total", target=u) >= 1  # type: ignore[operator]

    # A second scrape without any event: nothing counted, start times identical.
    time.sleep(1.5)
    s = scrape(exp)
    assert value(s, resets, target=u) == 0
    assert (value(s, start, target=u), value(s, start, target=b)) == (u_start, b_start)

    # unbound-control flush of the canary: one reset, counted when the next answer counts
    # down from the refetched TTL; the process did not restart.
    time.sleep(1.5)
    unbound.control("flush", "canary.example.test")
    flushed = time.time()
    s = scrape(exp)
    assert value(s, resets, target=u) == 0
    time.sleep(1.5)
    s = scrape(exp)
    assert value(s, resets, target=u) == 1
    assert value(s, start, target=u) == u_start
    assert value(s, "dnsfleet_resolver_last_cache_reset_timestamp_seconds",
                 target=u) == pytest.approx(flushed, abs=1)

    # Restart unbound: a reset and a new start time.
    time.sleep(2.5)
    unbound.restart()
    s = scrape(exp)
    time.sleep(1.5)
    s = scrape(exp)
    assert value(s, resets, target=u) == 2
    new_start = value(s, start, target=u)
    assert new_start is not None and new_start > u_start  # type: ignore[operator]
    assert value(s, "dnsfleet_resolver_backend_changes_total", target=u) == 0

    # Another nsid (another backend behind the address): a backend change.
    time.sleep(1.0)
    unbound.extra_server = '  nsid: "ascii_backend-b"'
    unbound.restart()
    s = scrape(exp)
    assert value(s, "dnsfleet_resolver_backend_changes_total", target=u, site="lab1") == 1
    assert value(s, "dnsfleet_resolver_backend_info", target=u, backend="backend-b") == 1
    assert value(s, "dnsfleet_resolver_backend_info", target=u, backend="backend-a") is None
    # Its cache is another cache: its fresh canary is not a reset of the old one.
    assert value(s, resets, target=u) == 2

    # Restart BIND: its boot-time moves.
    named.restart()
    s = scrape(exp)
    assert value(s, "dnsfleet_resolver_stats_up", target=b) == 1
    assert value(s, start, target=b) > b_start  # type: ignore[operator]


def test_natural_expiry_is_not_a_reset(pair: tuple[Named, Unbound], tmp_path: Path) -> None:
    named, unbound = pair
    exp = exporter(tmp_path, fleet(named, unbound, tmp_path, canary="brief.example.test"))
    u = unbound.address
    ttl = "dnsfleet_resolver_canary_ttl_seconds"
    t0 = time.monotonic()
    first = value(scrape(exp), ttl, target=u)
    time.sleep(2.0)
    second = value(scrape(exp), ttl, target=u)
    assert first is not None and second is not None and second < first
    time.sleep(max(0.0, 9.5 - (time.monotonic() - t0)))  # TTL 8: expired and refetched
    s = scrape(exp)
    third = value(s, ttl, target=u)
    assert third is not None and third > second, "the canary was not fetched afresh"
    assert value(s, "dnsfleet_resolver_cache_resets_total", target=u) == 0


def test_authoritative_canary_never_counts_resets(unbound: Unbound, tmp_path: Path) -> None:
    """local-data is answered with AA and a constant TTL: without the AA check every scrape
    looked like a cache reset (TTL "went up" by the elapsed time)."""
    exp = exporter(tmp_path, {"modules": {"m": {"query_name": "a.local.test",
                                                "canary": "a.local.test",
                                                "canary_tolerance": "500ms"}},
                              "targets": [{"address": unbound.address, "module": "m"}]})
    u = unbound.address
    for _ in range(3):
        s = scrape(exp)
        time.sleep(1.2)
    assert value(s, "dnsfleet_resolver_canary_ttl_seconds", target=u) == 300
    assert value(s, "dnsfleet_resolver_canary_cached", target=u) == 0
    assert value(s, "dnsfleet_resolver_cache_resets_total", target=u) == 0


# ------------------------------------------------------------------ the real channels


def _query(host: str, port: int, name: str, n: int) -> None:
    for _ in range(n):
        dns.query.udp(dns.message.make_query(name, "A"), host, port=port, timeout=2)


def test_unbound_control_socket_live_counters(unbound: Unbound, tmp_path: Path) -> None:
    exp = exporter(tmp_path, {"modules": {"m": {"query_name": "a.local.test"}}, "targets": [
        {"address": unbound.address, "module": "m",
         "stats": {"type": "unbound", "control": f"unix://{unbound.control_socket}"}}]})
    q = "dnsfleet_resolver_queries_total"
    s1 = scrape(exp)
    _query(unbound.host, unbound.port, "a.local.test", 25)
    s2 = scrape(exp)
    # Our 25 plus the probe of scrape 2 (scrape 1's probe may race its stats read).
    assert value(s2, q, target=unbound.address) - value(s1, q, target=unbound.address) >= 25  # type: ignore[operator]
    # stats_noreset: the counters unbound-control sees were not zeroed by our reads.
    theirs = parse_unbound_stats(unbound.control("stats_noreset"))
    assert theirs.queries >= value(s2, q, target=unbound.address)  # type: ignore[operator]
    assert theirs.start_time == value(s2, "dnsfleet_resolver_start_time_seconds",
                                      target=unbound.address)
    assert value(s2, "dnsfleet_resolver_responses_total", target=unbound.address,
                 rcode="NOERROR") >= 25  # type: ignore[operator]
    assert value(s2, "dnsfleet_resolver_rcode_stats_available", target=unbound.address) == 1
    assert value(s2, "dnsfleet_resolver_stale_answers_total", target=unbound.address) == 0
    assert value(s2, "dnsfleet_resolver_info", target=unbound.address,
                 version=subprocess.run([binary("unbound"), "-V"], capture_output=True,
                                        text=True).stdout.split()[1]) == 1


def test_unbound_without_extended_statistics(tmp_path: Path) -> None:
    """Without `extended-statistics: yes` unbound prints no per-rcode counts: dnsfleet
    exported `responses_total{rcode="SERVFAIL"} 0` while SERVFAILs went out. Now the
    family is absent and dnsfleet_resolver_rcode_stats_available says why."""
    u = Unbound(tmp_path / "u", extended_statistics=False,
                stubs={"dead.test.": f"127.0.0.1@{free_port()}"},
                extra_server="  infra-cache-max-rtt: 300\n  max-sent-count: 2\n")
    u.start()
    try:
        exp = exporter(tmp_path, {"modules": {"m": {"query_name": "a.local.test"}},
                                  "targets": [{"address": u.address, "module": "m", "stats": {
                                      "type": "unbound",
                                      "control": f"unix://{u.control_socket}"}}]})
        for _ in range(3):
            with contextlib.suppress(dns.exception.Timeout):
                dns.query.udp(dns.message.make_query("x.dead.test", "A"), u.host,
                              port=u.port, timeout=3)
        s = scrape(exp)
        assert value(s, "dnsfleet_resolver_stats_up", target=u.address) == 1
        assert value(s, "dnsfleet_resolver_rcode_stats_available", target=u.address) == 0
        assert not [k for k in s if k[0] == "dnsfleet_resolver_responses_total"]
        assert value(s, "dnsfleet_resolver_queries_total", target=u.address) >= 3  # type: ignore[operator]
    finally:
        u.stop()


def test_bind_statistics_channel(named: Named, tmp_path: Path) -> None:
    exp = exporter(tmp_path, {"modules": {"m": {"query_name": "www.example.test"}}, "targets": [
        {"address": named.address, "module": "m",
         "stats": {"type": "bind", "url": named.stats_url}}]})
    s1 = scrape(exp)
    _query(named.host, named.port, "www.example.test", 10)
    s2 = scrape(exp)
    q = "dnsfleet_resolver_queries_total"
    assert value(s2, q, target=named.address) - value(s1, q, target=named.address) >= 10  # type: ignore[operator]
    assert value(s2, "dnsfleet_resolver_start_time_seconds", target=named.address) == \
        pytest.approx(process_start(named.proc.pid), abs=2)  # type: ignore[union-attr]


class TlsUnbound(Unbound):
    """unbound with remote control over TLS on a TCP port (control-use-cert: yes)."""

    control_port: int = 0

    def write_config(self) -> Path:
        path = super().write_config()
        keys = self.workdir
        text = path.read_text()
        head, _, tail = text.partition("remote-control:")
        stubs = tail[tail.find("stub-zone:"):] if "stub-zone:" in tail else ""
        path.write_text(head + f"""remote-control:
  control-enable: yes
  control-interface: 127.0.0.1
  control-port: {self.control_port}
  control-use-cert: yes
  server-key-file: "{keys}/unbound_server.key"
  server-cert-file: "{keys}/unbound_server.pem"
  control-key-file: "{keys}/unbound_control.key"
  control-cert-file: "{keys}/unbound_control.pem"
{stubs}""")
        return path


def test_unbound_control_tls(tmp_path: Path) -> None:
    from tests.tools import free_port
    u = TlsUnbound(tmp_path / "ub", local_data=["a.local.test. 300 IN A 192.0.2.1"])
    u.control_port = free_port()
    subprocess.run([binary("unbound-control-setup"), "-d", str(u.workdir)], check=True,
                   capture_output=True, timeout=60)
    good = {"type": "unbound", "control": f"tls://127.0.0.1:{u.control_port}",
            "server_cert": str(u.workdir / "unbound_server.pem"),
            "client_cert": str(u.workdir / "unbound_control.pem"),
            "client_key": str(u.workdir / "unbound_control.key")}
    # Keys of another installation: unbound refuses our client certificate, and we refuse
    # a server certificate we were not told to trust.
    other = tmp_path / "other-keys"
    other.mkdir()
    subprocess.run([binary("unbound-control-setup"), "-d", str(other)], check=True,
                   capture_output=True, timeout=60)
    wrong_client = {**good, "client_cert": str(other / "unbound_control.pem"),
                    "client_key": str(other / "unbound_control.key")}
    wrong_server = {**good, "server_cert": str(other / "unbound_server.pem")}
    u.start()
    try:
        exp = exporter(tmp_path, {"modules": {"m": {"query_name": "a.local.test"},
                                              "n": {"query_name": "a.local.test"}},
                                  "targets": [
                                      {"address": u.address, "module": "m", "stats": good},
                                      {"address": f"127.0.0.1:{u.port}", "module": "n"}]})
        s = scrape(exp)
        assert value(s, "dnsfleet_resolver_stats_up", target=u.address) == 1
        assert value(s, "dnsfleet_resolver_start_time_seconds",
                     target=u.address) == pytest.approx(process_start(u.proc.pid), abs=2)  # type: ignore[union-attr]
        for wrong in (wrong_client, wrong_server):
            exp = exporter(tmp_path, {"modules": {"m": {"query_name": "a.local.test"}},
                                      "targets": [{"address": u.address, "module": "m",
                                                   "stats": wrong}]})
            s = scrape(exp)
            assert value(s, "dnsfleet_resolver_stats_up", target=u.address) == 0
            assert value(s, "dnsfleet_collector_success", collector="resolver_stats") == 1
    finally:
        u.stop()


# ------------------------------------------------------------------ hostile and missing


class GarbageSocket:
    def __init__(self, path: Path, reply: bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.reply = reply
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.recv(100)
                if self.reply:
                    conn.sendall(self.reply)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def test_unreadable_statistics(named: Named, tmp_path: Path) -> None:
    garbage = GarbageSocket(tmp_path / "garbage.ctl", b"\x00\xffnot=stats at all\n")
    silent = GarbageSocket(tmp_path / "silent.ctl", b"")
    try:
        sources = {
            "127.0.0.1:1": {"type": "unbound", "control": f"unix://{tmp_path}/missing.ctl"},
            "127.0.0.2:1": {"type": "unbound", "control": f"unix://{tmp_path}/garbage.ctl"},
            "127.0.0.3:1": {"type": "unbound", "control": f"unix://{tmp_path}/silent.ctl"},
            "127.0.0.4:1": {"type": "bind", "url": named.stats_url + "/nothing-here"},
            "127.0.0.5:1": {"type": "bind", "url": "http://127.0.0.1:1"},
        }
        exp = exporter(tmp_path, {"modules": {"m": {"timeout": "200ms"}}, "targets": [
            {"address": a, "module": "m", "stats": src} for a, src in sources.items()]})
        s = scrape(exp)
        for a in sources:
            assert value(s, "dnsfleet_resolver_stats_up", target=a) == 0, a
            assert value(s, "dnsfleet_resolver_start_time_seconds", target=a) is None
        assert value(s, "dnsfleet_collector_success", collector="resolver_stats") == 1
    finally:
        garbage.close()
        silent.close()


# ------------------------------------------------------------------ capacity


def test_capacity_test_records_and_exporter_reads(unbound: Unbound, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "lib" / "capacity.json"
    base = ["capacity-test", "--target", unbound.address, "--query", "a.local.test/A",
            "--max-qps", "2000", "--ramp", "2", "--max-loss", "5", "--state-file", str(state)]
    assert dnsfleet_main(base) == 2  # no --yes: refuses, sends nothing
    assert not state.exists()
    assert dnsfleet_main([*base, "--yes"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "capacity" in out and str(state) in out
    exp = exporter(tmp_path, {
        "modules": {"m": {"query_name": "a.local.test"}},
        "targets": [{"address": unbound.address, "module": "m", "labels": {"site": "lab1"}},
                    {"address": "127.0.0.9:53", "module": "m", "capacity_qps": 12345}],
        "resolver": {"capacity_file": str(state)}})
    s = scrape(exp)
    measured = value(s, "dnsfleet_resolver_capacity_qps", target=unbound.address, site="lab1")
    assert measured is not None and 0 < measured <= 2000
    assert value(s, "dnsfleet_resolver_capacity_qps", target="127.0.0.9:53") == 12345
    assert value(s, "dnsfleet_resolver_capacity_measured_timestamp_seconds",
                 target=unbound.address) == pytest.approx(time.time(), abs=60)
    # A garbled state file fails the collector, not the scrape.
    state.write_text("{garbage")
    s = scrape(exp)
    assert value(s, "dnsfleet_collector_success", collector="resolver_capacity") == 0
    assert value(s, "dnsfleet_probe_success", target=unbound.address) == 1
