"""Hostile neighbours: a healthy fleet (real unbound over UDP, DoT and DoH with dnstap, BIND
serving a signed zone) scraped by a real Prometheus every 5 s, while beside it, all at once,
run: a client with a 0.5 s scrape deadline, one sending ``inf`` as its deadline, a DoH
endpoint flooding PING frames, one answering ``:status: abc``, one whose chain carries a
certificate with a notAfter that is no time, a zone nameserver that answers truncated and
then stalls over TCP, 64 dnstap writers that connect and say nothing, 3,000 dnstap queries
with 256 KiB client addresses, and scrapes dropped mid-reply. None of them may cost the
healthy parties anything: their probes succeed in at least 99 % of Prometheus' scrapes, no
/metrics answer is a 500, /-/healthy answers within 100 ms at the 99th percentile, the
dnstap ingest stays under 100 MB, and the dnstap counts of the healthy resolver equal what
its clients got. Each hostile party leaves evidence that it did its part."""

from __future__ import annotations

import collections
import contextlib
import math
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest
import yaml

from dnsfleet.dnstap.framestreams import DATA_MAX
from dnsfleet.dnstap.message import parse_frame
from tests.harness.dnssec import SignedNamed, make_zones
from tests.harness.dnstapwriter import Writer, pair
from tests.harness.exporter import ExporterProcess
from tests.harness.hostiledoh import HostileDoH
from tests.harness.metrics import Samples, matching, samples
from tests.harness.monitoring import Prometheus, http_get, prometheus_config
from tests.harness.pki import SERVER_NAME, Pki, make_pki
from tests.harness.servers import ScriptedServer, Unbound, answer
from tests.harness.tools import free_port, num

# About 100 s here; more on a machine busy with other suites.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

RUN = 75.0  # seconds of the hostile phase: 15 of Prometheus' scrapes
IDENTITY = "unbound-a"  # the healthy resolver's dnstap identity
INTRUDER = "intruder"  # the identity of the writer with huge client addresses
ZONE = "example.test."
HUGE_QUERIES = 3000
IDLE_WRITERS = 64
CLIENT_QUERIES = 300
POLL = 0.1  # seconds between two /-/healthy requests


@dataclass
class Fleet:
    work: Path
    exporter: ExporterProcess
    prom: Prometheus
    unbound: Unbound
    named: SignedNamed
    stall: ScriptedServer
    sock: Path
    healthy: dict[str, tuple[str, str]]  # name -> (target, module)
    hostile: dict[str, tuple[str, str]]


def late_truncated(q: bytes) -> list[bytes]:
    """Every answer truncated (ScriptedServer sends it 1.5 s late): the check goes to TCP."""
    return [answer(q, tc=True)]


def stall(q: bytes) -> list[bytes]:
    time.sleep(6)  # over TCP: accepts, reads the query, never answers
    return []


def unbound_with_everything(
    work: Path, pki: Pki, named: SignedNamed, sock: Path
) -> tuple[Unbound, int, int]:
    """unbound over UDP, DoT and DoH, resolving the signed zone at BIND, writing dnstap
    to the exporter's socket: (unbound, its DoT port, its DoH port)."""
    dot, doh = free_port(), free_port()
    u = Unbound(
        work / "unbound",
        stubs={ZONE: f"127.0.0.1@{named.port}"},
        extra_server=(
            f"  interface: 127.0.0.1@{dot}\n  interface: 127.0.0.1@{doh}\n"
            f"  tls-port: {dot}\n  https-port: {doh}\n"
            f'  tls-service-pem: "{pki.chain("good")}"\n'
            f'  tls-service-key: "{pki.key("good")}"\n'
            '  http-endpoint: "/dns-query"\n'
        ),
        extra_config=f"""
dnstap:
  dnstap-enable: yes
  dnstap-bidirectional: yes
  dnstap-socket-path: "{sock}"
  dnstap-send-identity: yes
  dnstap-identity: "{IDENTITY}"
  dnstap-log-client-query-messages: yes
  dnstap-log-client-response-messages: yes
""",
    )
    return u, dot, doh


def config(
    *, pki: Pki, u: Unbound, ports: tuple[int, int], named: SignedNamed, slow: ScriptedServer,
    sock: Path, doh: dict[str, HostileDoH], cas: dict[str, Path],
) -> tuple[dict[str, Any], dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:  # fmt: skip
    # The probes of the resolver ask TXT: the clients ask A and AAAA, and only those are
    # compared with what dnstap counted.
    tls = {"tls_server_name": SERVER_NAME, "tls_ca_file": str(pki.ca)}
    url = f"https://{SERVER_NAME}/dns-query"
    modules: dict[str, Any] = {
        "udp": {"query_name": "www.example.test", "query_type": "TXT"},
        "dot": {"query_name": "www.example.test", "query_type": "TXT", "transport": "tls", **tls},
        "doh": {"query_name": "www.example.test", "query_type": "TXT", "transport": "https",
                "doh_url": url, **tls},
        "auth": {"query_name": "www.example.test", "query_type": "A"},
    }  # fmt: skip
    for name, ca in cas.items():
        modules[name] = {"query_name": "www.example.test", "transport": "https",
                         "tls_ca_file": str(ca), "timeout": "2s"}  # fmt: skip
    healthy = {
        "unbound": (u.address, "udp"),
        "unbound_dot": (f"127.0.0.1:{ports[0]}", "dot"),
        "unbound_doh": (f"127.0.0.1:{ports[1]}", "doh"),
        "bind": (named.address, "auth"),
    }
    hostile = {name: (d.address, name) for name, d in doh.items()}
    doc = {
        "resolv_conf": [],
        "modules": modules,
        "targets": [
            {"address": a, "module": m, "labels": {"role": role}}
            for role, group in (("healthy", healthy), ("hostile", hostile))
            for a, m in group.values()
        ],
        "zones": [{"name": ZONE, "nameservers": [named.address, slow.address], "timeout": "2s"}],
        "dnstap": {"socket": str(sock), "identities": {IDENTITY: u.address}},
    }
    return doc, healthy, hostile


@contextlib.contextmanager
def fleet(work: Path) -> Iterator[Fleet]:
    pki = make_pki(work / "pki")
    zones = make_zones(work / "zones")
    sock = work / "dnstap.sock"
    with contextlib.ExitStack() as stack:
        signed = {"example.test": zones.files["example.test"]}
        named = SignedNamed(work / "named", zone_files=signed)
        named.start()
        stack.callback(named.stop)
        slow = ScriptedServer(late_truncated, tcp_handler=stall, udp_delay=1.5)
        stack.callback(slow.close)
        doh = {
            "flood": HostileDoH("ping_flood", flood_for=RUN + 60),
            "badstatus": HostileDoH("bad_status"),
            "badchain": HostileDoH("bad_chain_date"),
        }
        for d in doh.values():
            stack.callback(d.close)
        cas = {n: d.write_ca(work / f"{n}-ca.pem") for n, d in doh.items()}
        u, dot, doh_port = unbound_with_everything(work, pki, named, sock)
        doc, healthy, hostile = config(
            pki=pki, u=u, ports=(dot, doh_port), named=named, slow=slow, sock=sock, doh=doh,
            cas=cas,
        )  # fmt: skip
        cfg = work / "dnsfleet.yml"
        cfg.write_text(yaml.safe_dump(doc))
        exp = ExporterProcess(f"--config.file={cfg}", cwd=work)
        stack.callback(exp.stop)
        deadline = time.monotonic() + 60  # the ingest process listens before unbound starts
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        u.start()
        stack.callback(u.stop)
        targets = work / "targets.yml"
        targets.write_text(yaml.safe_dump([{"targets": [f"127.0.0.1:{exp.port}"],
                                            "labels": {"site": "lab"}}]))  # fmt: skip
        (work / "prom").mkdir()
        prom = Prometheus(
            work / "prom",
            prometheus_config(rule_files=[], targets_file=targets, alertmanager_port=None,
                              scrape_interval="5s"),
        )  # fmt: skip
        prom.start()
        stack.callback(prom.stop)
        yield Fleet(work, exp, prom, u, named, slow, sock, healthy, hostile)


# ---------------------------------------------------------------- the parties beside it


@dataclass
class Log:
    """What the parties saw, written by their threads, read after they stopped."""

    statuses: dict[str, collections.Counter[int]] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    notes: collections.Counter[str] = field(default_factory=collections.Counter)
    sent: collections.Counter[str] = field(default_factory=collections.Counter)
    rss: list[int] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)  # a party's own exception
    lock: threading.Lock = field(default_factory=threading.Lock)

    def status(self, who: str, code: int) -> None:
        with self.lock:
            self.statuses[who][code] += 1

    def note(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.notes[what] += n


def http(port: int, path: str, header: str | None, timeout: float = 30) -> tuple[int, str]:
    """One GET on a fresh connection: (status, body); status 0 when no answer came."""
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if header is not None:
        head += f"X-Prometheus-Scrape-Timeout-Seconds: {header}\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall((head + "\r\n").encode())
            raw = b""
            while chunk := s.recv(1 << 16):
                raw += chunk
    except OSError:
        return 0, ""
    if not raw.startswith(b"HTTP/1.1 "):
        return 0, ""
    return int(raw.split(b" ", 2)[1]), raw.partition(b"\r\n\r\n")[2].decode(errors="replace")


def lines_with(body: str, name: str, *parts: str) -> list[str]:
    return [
        ln for ln in body.splitlines() if ln.startswith(name + "{") and all(p in ln for p in parts)
    ]


def every(interval: float, stop: threading.Event, act: Callable[[int], None]) -> None:
    """``act(i)`` every ``interval`` seconds until ``stop``; at most RUN / interval + 1 times."""
    for i in range(int(RUN / interval) + 1):
        if stop.is_set():
            return
        t0 = time.monotonic()
        act(i)
        stop.wait(max(0.0, interval - (time.monotonic() - t0)))


def short_deadline_scraper(port: int, log: Log, stop: threading.Event) -> None:
    """A scraper whose deadline is 0.5 s: its probes get 50 ms and some time out, which it
    asked for; its dnstap request is cut short when the ingest is busy."""

    def act(_: int) -> None:
        code, body = http(port, "/metrics", "0.5")
        log.status("short", code)
        if lines_with(body, "dnsfleet_probe_failure", 'reason="timeout"', "} 1"):
            log.note("short saw its own timeouts")
        if lines_with(body, "dnsfleet_collector_success", 'collector="dnstap"', "} 0"):
            log.note("short cut its dnstap request")

    every(0.25, stop, act)


def inf_client(port: int, log: Log, stop: threading.Event) -> None:
    every(1.0, stop, lambda _: log.status("inf", http(port, "/metrics", "inf")[0]))


def cancelling_client(port: int, log: Log, stop: threading.Event) -> None:
    """Scrapes dropped (a reset) 0 to 50 ms after asking, while their cycle is still
    probing and collecting (the ingest's reply among what it waits for); half with no
    deadline of their own, half with 0.5 s."""
    rnd = random.Random(7)

    def act(i: int) -> None:
        head = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
        if i % 2:
            head += "X-Prometheus-Scrape-Timeout-Seconds: 0.5\r\n"
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 10) as s:
            s.sendall((head + "\r\n").encode())
            time.sleep(rnd.uniform(0, 0.05))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            log.note("cancelled scrapes")

    every(0.5, stop, act)


def recorder(port: int, log: Log, stop: threading.Event) -> None:
    """A patient scraper with Prometheus' own deadline: every answer's status, and whether
    the dnstap ingest answered it (replies cut short by other scrapes must leave it in
    step)."""

    def act(_: int) -> None:
        code, body = http(port, "/metrics", "5")
        log.status("recorder", code)
        if "\ndnsfleet_dnstap_ingest_up 1\n" in body:
            log.note("recorder saw the ingest answer")

    every(2.5, stop, act)


def dns_clients(address: str, log: Log, stop: threading.Event) -> None:
    """CLIENT_QUERIES A and AAAA queries to the resolver over the run: what they got."""
    host, port = address.rsplit(":", 1)
    batch = 10

    def act(i: int) -> None:
        for j in range(batch):
            n = i * batch + j
            name, qtype = [
                ("www.example.test.", "A"),
                (f"n{n}.example.test.", "AAAA"),
                (f"x{n}.local.test.", "A"),
            ][n % 3]
            q = dns.message.make_query(name, qtype, use_edns=0)
            try:
                r = dns.query.udp(q, host, port=int(port), timeout=10)
            except (TimeoutError, dns.exception.Timeout):
                log.note("client timeouts")
                continue
            with log.lock:
                log.sent[dns.rcode.to_text(r.rcode())] += 1

    # Spread over the run; once it ends (a slow machine), the rest go without a pause.
    interval = RUN / (CLIENT_QUERIES / batch + 1)
    for i in range(CLIENT_QUERIES // batch):
        stop.wait(interval)
        act(i)


def idle_writers(sock: Path, log: Log, stop: threading.Event) -> None:
    """IDLE_WRITERS writers that shake hands and then say nothing for the whole run."""
    held = []
    for _ in range(IDLE_WRITERS):
        w = Writer(str(sock), timeout=30)
        try:
            w.handshake()
            held.append(w)
        except OSError:  # refused: every slot held by a writer active within a second
            w.close()
            log.note("idle writers refused")
    log.note("idle writers connected", len(held))
    stop.wait(RUN + 5)
    for w in held:
        w.close()


def huge_addresses(sock: Path, log: Log, stop: threading.Event) -> None:
    """HUGE_QUERIES CLIENT_QUERY messages whose query_address fills the frame, in bursts."""
    d: Any = parse_frame(pair("a.test.", identity=INTRUDER.encode())[0])
    d.message.query_address = b"\xab" * (DATA_MAX - 512)
    bursts = 6
    w = Writer(str(sock), timeout=60)
    try:
        w.handshake()
        for b in range(bursts):
            stop.wait(RUN / (bursts + 1))  # as the clients: all of them, whatever the pace
            for i in range(HUGE_QUERIES // bursts):
                d.message.query_port = b * 1000 + i
                w.send(d.SerializeToString())
                log.note("huge queries sent")
        w.stop()
    finally:
        w.close()


def party(fn: Callable[..., None], *args: Any) -> None:
    """``fn`` in its thread: an exception of its own is recorded (the run then fails), not
    lost in the thread."""
    log: Log = args[-2]
    try:
        fn(*args)
    except Exception as e:
        with log.lock:
            log.crashed.append(f"{fn.__name__}: {e!r}")


def ingest_pid(exporter_pid: int) -> int:
    """The dnstap ingest process: the exporter's child running dnsfleet.dnstap.ingest."""
    for _ in range(100):
        kids = Path(f"/proc/{exporter_pid}/task/{exporter_pid}/children").read_text().split()
        for kid in kids:
            with contextlib.suppress(OSError):
                if b"dnsfleet.dnstap.ingest" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    return int(kid)
        time.sleep(0.1)
    raise AssertionError("no ingest process")


def rss_sampler(pid: int, log: Log, stop: threading.Event) -> None:
    def act(_: int) -> None:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    log.rss.append(int(line.split()[1]) * 1024)

    every(0.25, stop, act)


# A process of its own, so the test's busy threads (the DoH flood, the 256 KiB frames, the
# parsing of expositions) never delay its timing: what it measures is the exporter's.
# It asks a control in turn: Python's http.server in a process of its own, which no
# neighbour touches, so its latency is what the machine's load alone costs a request.
HEALTH_POLLER = """
import http.client, sys, time
port, n, interval, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
control = int(sys.argv[5])

def ask(port, path):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        status = r.status
    except OSError:
        status = 0
    finally:
        c.close()
    return status, time.perf_counter() - t0

with open(out, "w") as f:
    for _ in range(n):
        status, took = ask(port, "/-/healthy")
        _, control_took = ask(control, "/healthy")
        f.write(f"{status} {took:.6f} {control_took:.6f}\\n")
        f.flush()
        time.sleep(interval)
"""


def percentile(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1)]


# ---------------------------------------------------------------- reading the results


@dataclass
class Outcome:
    """The run as seen afterwards: Prometheus' samples of the hostile phase (the ``window``
    seconds before ``at``), the exporter's last scrape, the parties' log."""

    fleet: Fleet
    log: Log
    polls: list[tuple[str, float]]  # /-/healthy: (status, seconds)
    control: list[float]  # seconds, the control's answer after each of them
    window: int
    at: float
    last: Samples
    counted: collections.Counter[str]  # the resolver's A and AAAA responses, by rcode
    ingest: int

    def seen(self, expr: str) -> list[float]:
        """Every value Prometheus scraped of ``expr`` in the hostile phase, all series."""
        q = urllib.parse.urlencode({"query": f"{expr}[{self.window}s]", "time": self.at})
        body = http_get(f"{self.fleet.prom.url}/api/v1/query?{q}")
        assert body["status"] == "success", body
        return [float(v) for r in body["data"]["result"] for _, v in r["values"]]

    def ones(self, expr: str) -> int:
        return sum(v == 1 for v in self.seen(expr))

    def figures(self) -> dict[str, Any]:
        lat = [t * 1000 for _, t in self.polls]
        cpu = self.seen("process_cpu_seconds_total")
        return {
            "probe_success": {
                name: f"{self.ones(success(t, m))}/{len(self.seen(success(t, m)))}"
                for name, (t, m) in self.fleet.healthy.items()
            },
            "healthy_ms": {
                "n": len(lat),
                **{k: round(percentile(lat, q), 1) for k, q in (("p50", 50), ("p99", 99))},
                "max": round(max(lat), 1),
                "control_p99": round(percentile(self.control, 99) * 1000, 1),
            },
            "loop_lag_max_s": max(self.seen("dnsfleet_event_loop_lag_seconds"), default=None),
            "exporter_cpu_s": round(cpu[-1] - cpu[0], 1) if cpu else None,
            "ingest_rss_peak_mb": round(max(self.log.rss, default=0) / 2**20, 1),
            "dnstap": dict(self.counted),
            "sent": dict(self.log.sent),
            "statuses": {k: dict(v) for k, v in self.log.statuses.items()},
            "notes": dict(self.log.notes),
        }


def success(target: str, module: str) -> str:
    return f'dnsfleet_probe_success{{target="{target}",module="{module}"}}'


def resolver_responses(s: Samples, target: str) -> collections.Counter[str]:
    got: collections.Counter[str] = collections.Counter()
    for (n, lab), v in s.items():
        labels = dict(lab)
        if n != "dnsfleet_dnstap_responses_total" or labels["target"] != target:
            continue
        if labels["qtype"] in ("A", "AAAA"):
            got[labels["rcode"]] += int(v)
    return got


def settled(
    exp: ExporterProcess, target: str, want: int
) -> tuple[Samples, collections.Counter[str]]:
    """Scrape until ``want`` of the resolver's responses are counted (unbound writes
    dnstap asynchronously), or 60 s: the samples and the responses by rcode."""
    deadline = time.monotonic() + 60
    while True:
        code, body = http(exp.port, "/metrics", "10")
        assert code == 200, body
        s = samples(body)
        got = resolver_responses(s, target)
        if got.total() >= want or time.monotonic() > deadline:
            return s, got
        time.sleep(0.5)


def hostile_phase(f: Fleet) -> Outcome:
    """Every party beside the fleet for RUN seconds, then what was seen."""
    port = f.exporter.port
    ingest = ingest_pid(f.exporter.proc.pid)
    log = Log()
    stop = threading.Event()
    parties: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
        (idle_writers, (f.sock,)),
        (huge_addresses, (f.sock,)),
        (short_deadline_scraper, (port,)),
        (inf_client, (port,)),
        (cancelling_client, (port,)),
        (recorder, (port,)),
        (dns_clients, (f.unbound.address,)),
        (rss_sampler, (ingest,)),
    ]
    threads = [
        threading.Thread(target=party, args=(fn, *args, log, stop), daemon=True)
        for fn, args in parties
    ]
    polls = f.work / "healthy.txt"
    (f.work / "control").mkdir()
    (f.work / "control" / "healthy").write_text("Healthy\n")
    cport = free_port(socket.SOCK_STREAM)
    control = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory",
         str(f.work / "control"), str(cport)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:  # the control listens before the poller's first request
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", cport), 1):
            break
        assert time.monotonic() < deadline and control.poll() is None, "control server"
        time.sleep(0.05)
    poller = subprocess.Popen(
        [sys.executable, "-c", HEALTH_POLLER, str(port), str(int(RUN / POLL)), str(POLL),
         str(polls), str(cport)],
    )  # fmt: skip
    t0 = time.time()
    for t in threads:
        t.start()
    try:
        time.sleep(RUN)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        with contextlib.suppress(subprocess.TimeoutExpired):
            poller.wait(timeout=60)
        poller.kill()
        control.kill()
        control.wait()
    time.sleep(6)  # one more of Prometheus' scrapes
    at = time.time()
    last, counted = settled(f.exporter, f.unbound.address, log.sent.total())
    polled = [ln.split() for ln in polls.read_text().splitlines()]
    return Outcome(
        f,
        log,
        [(c, float(t)) for c, t, _ in polled],
        [float(t) for *_, t in polled],
        math.ceil(at - t0),
        at,
        last,
        counted,
        ingest,
    )


def test_hostile_neighbours_cost_the_healthy_fleet_nothing(tmp_path: Path) -> None:
    began = time.monotonic()
    with fleet(tmp_path) as f:
        f.prom.wait('up{job="dnsfleet"} == 1', timeout=60)
        f.prom.wait(f'dnsfleet_probe_success{{target="{f.unbound.address}"}}', timeout=60)
        o = hostile_phase(f)
        print(f"\nhostile neighbours: {o.figures()} in {time.monotonic() - began:.0f} s")
        judge(o)
        evidence(o)


def judge(o: Outcome) -> None:
    """The healthy fleet's invariants, over the whole hostile phase."""
    f, log, last = o.fleet, o.log, o.last
    assert log.crashed == []
    # Prometheus scraped the exporter throughout, and every scrape was answered.
    scrapes = len(o.seen('up{job="dnsfleet"}'))
    assert scrapes >= 12, scrapes
    assert o.ones('up{job="dnsfleet"}') >= 0.99 * scrapes, o.seen('up{job="dnsfleet"}')
    # Every healthy target succeeded in 99 % of those scrapes, and the zone's healthy
    # nameserver was up in as many.
    for name, (target, module) in f.healthy.items():
        assert o.ones(success(target, module)) >= 0.99 * scrapes, (name, o.figures())
    up = f'dnsfleet_zone_nameserver_up{{nameserver="{f.named.address}"}}'
    assert o.ones(up) >= 0.99 * scrapes, o.seen(up)
    # No /metrics answer was a 500: not to Prometheus (up), the patient recorder or the
    # short client (a 503 is its own deadline, which it may not meet); `inf` is a 400.
    assert set(log.statuses["recorder"]) == {200}, log.statuses
    assert 500 not in log.statuses["short"] and log.statuses["short"][200] > 0, log.statuses
    assert set(log.statuses["inf"]) == {400}, log.statuses
    # /-/healthy, polled from a process of its own: within 100 ms at the 99th percentile,
    # beyond what the machine's load costs the control (a stalled loop costs seconds; a
    # busy shared machine costs every process alike, and failed this at 0.1 s flat).
    assert len(o.polls) >= RUN / POLL / 2, len(o.polls)
    assert {c for c, _ in o.polls} == {"200"}, collections.Counter(c for c, _ in o.polls)
    p99 = percentile([t for _, t in o.polls], 99)
    assert p99 < 0.100 + percentile(o.control, 99), o.figures()["healthy_ms"]
    # The ingest's memory stayed bounded, and it was never restarted.
    assert log.rss and max(log.rss) < 100 * 1024 * 1024, max(log.rss)
    assert ingest_pid(f.exporter.proc.pid) == o.ingest
    assert num(matching(last, "dnsfleet_dnstap_ingest_starts_total")) == 1
    assert num(matching(last, "dnsfleet_dnstap_ingest_up")) == 1
    # The resolver's dnstap counts are what its clients got.
    assert log.sent.total() == CLIENT_QUERIES, (log.sent, log.notes)
    assert set(log.sent) == {"NOERROR", "NXDOMAIN"}, log.sent
    assert o.counted == log.sent
    unmatched = "dnsfleet_dnstap_unmatched_responses_total"
    assert matching(last, unmatched, target=f.unbound.address) is None


def evidence(o: Outcome) -> None:
    """Each hostile party did its part."""
    f, log, last = o.fleet, o.log, o.last
    flood, badstatus, badchain = (f.hostile[n][0] for n in ("flood", "badstatus", "badchain"))
    failure = "dnsfleet_probe_failure"
    # The PING flood is cut once it has sent more than a response could hold.
    assert set(o.seen(f'{failure}{{target="{flood}",reason="malformed"}}')) == {1}
    assert set(o.seen(f'{failure}{{target="{badstatus}",reason="malformed"}}')) == {1}
    assert set(o.seen(f'dnsfleet_probe_success{{target="{badchain}"}}')) == {1}
    expiry = "dnsfleet_probe_tls_cert_expiry_timestamp_seconds"
    assert o.seen(f'{expiry}{{target="{badchain}"}}') == []
    assert o.seen(f'{expiry}{{target="{f.healthy["unbound_dot"][0]}"}}')
    stalled = {"nameserver": f.stall.address, "reason": "timeout"}
    assert matching(last, "dnsfleet_zone_nameserver_failure_reason", **stalled) == 1
    assert o.seen(f'dnsfleet_zone_nameserver_failure_reason{{nameserver="{f.stall.address}"}}')
    assert log.notes["short saw its own timeouts"] > 0, log.notes
    assert log.notes["cancelled scrapes"] > 100, log.notes
    recorded = log.statuses["recorder"][200]
    assert log.notes["recorder saw the ingest answer"] == recorded, log.notes
    assert log.notes["huge queries sent"] == HUGE_QUERIES
    intruder = {"target": INTRUDER, "type": "client_query"}
    assert matching(last, "dnsfleet_dnstap_messages_total", **intruder) == HUGE_QUERIES
    idle = log.notes["idle writers connected"] + log.notes["idle writers refused"]
    assert idle == IDLE_WRITERS, log.notes
    evicted = num(matching(last, "dnsfleet_dnstap_errors_total", reason="idle_evicted"))
    refused = num(matching(last, "dnsfleet_dnstap_errors_total", reason="too_many_connections"))
    assert evicted + refused > 0
    connected = log.notes["idle writers connected"] + 2  # and unbound, and the intruder
    assert num(matching(last, "dnsfleet_dnstap_connections_total")) >= connected
