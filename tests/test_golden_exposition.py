"""The exporter's whole /metrics output for a fixed configuration, compared with a committed
golden file (as node_exporter keeps collector/fixtures/e2e-output.txt): a family renamed,
added or dropped, a label or a value changed anywhere shows up here as a diff to review.

What is fixed: tests/fixtures/golden/dnsfleet.yml; a deterministic DNS responder on
loopback (an answer, NXDOMAIN, an answer with AD, SERVFAIL with an Extended DNS Error for the
bogus name, the canary), a closed loopback port (refused), CoreDNS statistics from a
recorded page (tests/fixtures/resolver/coredns-1.15-dnsperf.metrics.txt) served on loopback,
and the host collectors on the x86 fixture tree (tests/fixtures/host/x86) through
--path.procfs, --path.sysfs and --path.rootfs. The exporter runs one cycle (``--once``).

What is normalised (``normalise``), and only that:

- the loopback ports the responders got, which differ per run, become their role
  (``127.0.0.1:DNS``, ``127.0.0.1:CLOSED``);
- values measured with a clock become ``TIME``: the families in ``TIMED`` (durations,
  timestamps, the process's CPU time and start) and, of ``TIMED_HISTOGRAMS``, the buckets
  below +Inf and the sum (the count, +Inf included, is how many probes ran: kept);
- the samples of ``dnsfleet_collector_success`` and ``_duration_seconds`` are sorted: the
  collectors run concurrently and each family lists them in the order they finished;
- facts of the machine and interpreter running the test become ``HOST``: the families in
  ``HOST_FACTS`` (memory, descriptors, the concurrency derived from the open-file limit)
  and the Python version labels of ``dnsfleet_build_info`` and ``python_info``.

Every family named in those tables must be in the output, so a rename cannot leave a rule
behind. Regenerate with ``make golden`` and review the diff.
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import dns.rrset
import pytest

from tests.harness.hosttree import FIXTURES, TREES
from tests.harness.metrics import promtool_check
from tests.harness.servers import ScriptedServer, scripted
from tests.harness.tools import free_port

pytestmark = pytest.mark.integration

HERE = FIXTURES / "golden"
CONFIG = HERE / "dnsfleet.yml"
GOLDEN = HERE / "exposition.golden.prom"
STATS = FIXTURES / "resolver" / "coredns-1.15-dnsperf.metrics.txt"
REGENERATE = "make golden"

TIMED = frozenset(
    {
        "dnsfleet_probe_duration_seconds",
        "dnsfleet_collector_duration_seconds",
        "dnsfleet_scrape_duration_seconds",
        "dnsfleet_scrape_cycle_end_timestamp_seconds",
        "dnsfleet_config_last_reload_success_timestamp_seconds",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    }
)
TIMED_HISTOGRAMS = frozenset({"dnsfleet_probe_latency_seconds"})
# Families whose samples come in the order the collectors finished.
BY_COMPLETION = frozenset({"dnsfleet_collector_success", "dnsfleet_collector_duration_seconds"})
HOST_FACTS = frozenset(
    {
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "dnsfleet_probe_concurrency_limit",
    }
)
# The interpreter's version, by family: the labels that carry it.
PYTHON_LABELS = {
    "dnsfleet_build_info": re.compile(r'\b(python)="[^"]*"'),
    "python_info": re.compile(r'\b(major|minor|patchlevel|version)="[^"]*"'),
}
SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{.*\})? (?P<value>\S+)$")


def respond(query: bytes) -> list[bytes]:
    """The responder: what each name of the configuration gets, always the same."""
    q = dns.message.from_wire(query)
    r = dns.message.make_response(q)
    name = q.question[0].name.to_text()
    if name == "missing.example.test.":
        r.set_rcode(dns.rcode.NXDOMAIN)
    elif name == "bogus.example.test.":
        r.set_rcode(dns.rcode.SERVFAIL)
        r.use_edns(0, 0, 1232, options=[dns.edns.EDEOption(dns.edns.EDECode.DNSSEC_BOGUS)])
    else:
        ttl = 3600 if name == "canary.example.test." else 300
        r.answer.append(dns.rrset.from_text(name, ttl, "IN", "A", "192.0.2.1"))
        if q.flags & dns.flags.AD:
            r.flags |= dns.flags.AD
    return [r.to_wire()]


class _Stats(http.server.BaseHTTPRequestHandler):
    body = STATS.read_bytes()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stats_server() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stats)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def exposition(tmp_path: Path, server: ScriptedServer, stats: int, closed: int) -> str:
    cfg = tmp_path / "dnsfleet.yml"
    text = CONFIG.read_text()
    for key, port in (("{dns}", server.port), ("{closed}", closed), ("{stats}", stats)):
        text = text.replace(key, str(port))
    cfg.write_text(text)
    root = TREES / "x86"
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet", "--once", "--config.file", str(cfg),
         "--path.procfs", str(root / "proc"), "--path.sysfs", str(root / "sys"),
         "--path.rootfs", str(root / "root")],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    ports = {str(server.port): "DNS", str(closed): "CLOSED"}
    return normalise(out.stdout, ports)


def normalise(text: str, ports: dict[str, str]) -> str:
    """The documented rule (module docstring); raises when a rule names an absent family."""
    seen: set[str] = set()
    out = []
    for raw in text.splitlines():
        line = raw
        for port, role in ports.items():
            line = line.replace(f'127.0.0.1:{port}"', f'127.0.0.1:{role}"')
        m = SAMPLE.match(line)
        if line.startswith("#") or m is None:
            out.append(line)
            continue
        name, labels, value = m["name"], m["labels"] or "", m["value"]
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        if name in TIMED or (family in TIMED_HISTOGRAMS and not _counts_probes(name, labels)):
            value = "TIME"
        elif name in HOST_FACTS:
            value = "HOST"
        if name in PYTHON_LABELS:
            labels = PYTHON_LABELS[name].sub(r'\1="HOST"', labels)
        seen.update({name, family})
        out.append(f"{name}{labels} {value}")
    missing = (TIMED | TIMED_HISTOGRAMS | HOST_FACTS | BY_COMPLETION) - seen
    assert not missing, f"normalisation rules name families no longer emitted: {missing}"
    return "\n".join(_sorted_runs(out)) + "\n"


def _sorted_runs(lines: list[str]) -> list[str]:
    """Each run of consecutive samples of a BY_COMPLETION family, sorted."""
    out: list[str] = []
    run: list[str] = []
    for line in [*lines, ""]:
        m = SAMPLE.match(line)
        if m is not None and m["name"] in BY_COMPLETION:
            run.append(line)
            continue
        out.extend(sorted(run))
        run = []
        out.append(line)
    return out[:-1]


def _counts_probes(name: str, labels: str) -> bool:
    return name.endswith("_count") or 'le="+Inf"' in labels


def test_whole_exposition_matches_golden(tmp_path: Path, stats_server: int) -> None:
    with scripted(respond) as server:
        text = exposition(tmp_path, server, stats_server, closed=free_port())
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), (
        f"the exposition differs from {GOLDEN.relative_to(FIXTURES.parent.parent)}: if the "
        f"change is intended, run `{REGENERATE}` and review the diff"
    )
    check = promtool_check(text.replace(" TIME\n", " 0\n").replace(" HOST\n", " 0\n"))
    assert check.returncode == 0, check.stdout + check.stderr
