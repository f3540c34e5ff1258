"""dnstap ingest: unbound streams every client query and response to the reader
while dnsperf sends a fixed rate of cached lookups; side by side in one run, the same feed
read by dnsfleet, by dnstap-receiver (PyPI, the Python peer) and by fstrm_capture (the
C reader from Debian's fstrm-bin: the control, showing what unbound itself drops).

Per reader and round: a fresh unbound (1 thread; client query and response messages, so
two events per query), ``dnsperf -Q RATE -l SECONDS``, then up to 15 s for the reader to
drain. Reported: events expected (twice unbound's own query count), events the reader
counted, loss, the reader's CPU (utime + stime, dnsfleet's exporter and its ingest process
together), events per CPU-second; for dnsfleet also /metrics latency (p50, p99, max) from a
scrape every 100 ms during the run, which shows whether ingest delays the exporter's loop.
Readers alternate which goes first each round.

    PYTHONPATH=. .venv/bin/python bench/bench_dnstap.py [--rate 20000] [--seconds 60] [--rounds 1]

dnstap-receiver comes from .venv-bench (``make bench`` installs it); without it its row
is skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from tests.harness.servers import Unbound
from tests.harness.tools import free_port

from bench.common import cpu_seconds, stop

RECEIVER = Path(".venv-bench/bin/dnstap_receiver")
NAMES = 1000


def children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        out += [int(k) for k in kids]
    return out


def count_frames(path: Path) -> int:
    """Data frames in a Frame Streams file (fstrm_capture's output)."""
    data = path.read_bytes()
    off = n = 0
    while off + 4 <= len(data):
        length = int.from_bytes(data[off : off + 4], "big")
        if length == 0:
            off += 8 + int.from_bytes(data[off + 4 : off + 8], "big")
        else:
            n += 1
            off += 4 + length
    return n


def get(url: str, headers: dict[str, str] | None = None) -> str:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(r.read().decode())


class Reader:
    """One reader of the socket: start, count what it has seen, CPU, stop."""

    def __init__(self, kind: str, work: Path, sock: Path) -> None:
        self.kind, self.work, self.sock = kind, work, sock
        self.port = free_port()
        self.capture = work / "capture.fstrm"
        if kind == "dnsfleet":
            conf = work / "dnsfleet.yml"
            conf.write_text(
                # No identity mapping: an identity must name a configured target now,
                # and the stream's own identity labels its series.
                f"resolv_conf: []\ntargets: []\ndnstap:\n  socket: {sock}\n"
            )
            cmd = [
                sys.executable, "-m", "dnsfleet", "--config.file", str(conf),
                "--web.listen-address", f"127.0.0.1:{self.port}", "--log.level", "warn",
            ]  # fmt: skip
        elif kind == "receiver":
            conf = work / "receiver.yml"
            conf.write_text(
                "trace: {verbose: false}\n"
                "web-api: {enable: true, api-key: bench, login: a, password: b, "
                f"local-address: 127.0.0.1, local-port: {self.port}}}\n"
                "statistics: {max-items: 10}\n"
                f"input: {{tcp-socket: {{enable: false}}, unix-socket: {{enable: true, "
                f"path: {sock}}}}}\noutput: {{stdout: {{enable: false}}}}\n"
            )
            cmd = [str(RECEIVER), "-c", str(conf)]
        else:
            cmd = ["fstrm_capture", "-t", "protobuf:dnstap.Dnstap", "-u", str(sock),
                   "-w", str(self.capture)]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=open(work / f"{kind}.log", "w"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [self.proc.pid, *children(self.proc.pid)]

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.pids())

    def seen(self) -> int:
        if self.kind == "dnsfleet":
            body = get(f"http://127.0.0.1:{self.port}/metrics")
            m = re.search(r"^dnsfleet_dnstap_frames_total (\d+)", body, re.M)
            return int(m.group(1)) if m else 0
        if self.kind == "receiver":
            body = get(f"http://127.0.0.1:{self.port}/metrics", {"X-API-Key": "bench"})
            q = re.search(r"^dnstap_queries (\d+)", body, re.M)
            r = re.search(r"^dnstap_responses (\d+)", body, re.M)
            return (int(q.group(1)) if q else 0) + (int(r.group(1)) if r else 0)
        return -1  # fstrm_capture: counted from its file after it stops

    def stop(self) -> int:
        stop(self.proc)
        return count_frames(self.capture) if self.kind == "capture" else -1


def scraper(port: int, until: float, lat: list[float]) -> None:
    while time.monotonic() < until:
        t0 = time.monotonic()
        try:
            get(f"http://127.0.0.1:{port}/metrics")
            lat.append(time.monotonic() - t0)
        except OSError:
            lat.append(float("inf"))
        time.sleep(0.1)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def run(kind: str, rate: int, seconds: int, work: Path) -> dict[str, object]:
    work.mkdir(parents=True)
    sock = work / "dnstap.sock"
    reader = Reader(kind, work, sock)
    unbound = Unbound(
        work / "unbound",
        local_data=[f"n{i}.local.test. 3600 IN A 192.0.2.1" for i in range(NAMES)],
        extra_server="  num-queries-per-thread: 4096\n  outgoing-range: 8192",
        extra_config=(
            f'dnstap:\n  dnstap-enable: yes\n  dnstap-socket-path: "{sock}"\n'
            '  dnstap-send-identity: yes\n  dnstap-identity: "bench"\n'
            "  dnstap-log-client-query-messages: yes\n"
            "  dnstap-log-client-response-messages: yes\n"
        ),
    )
    queries = work / "queries.txt"
    queries.write_text("".join(f"n{i}.local.test A\n" for i in range(NAMES)))
    try:
        unbound.start()
        time.sleep(2)  # unbound connects to the reader within a second

        def unbound_queries() -> int:
            out = unbound.control("stats_noreset")
            return int(re.search(r"^total\.num\.queries=(\d+)", out, re.M).group(1))  # type: ignore[union-attr]

        q0, s0, c0 = unbound_queries(), reader.seen(), reader.cpu()
        lat: list[float] = []
        t = None
        if kind == "dnsfleet":
            t = threading.Thread(
                target=scraper, args=(reader.port, time.monotonic() + seconds, lat), daemon=True
            )
            t.start()
        subprocess.run(
            ["dnsperf", "-s", "127.0.0.1", "-p", str(unbound.port), "-d", str(queries),
             "-c", "4", "-q", "2000", "-Q", str(rate), "-l", str(seconds)],
            capture_output=True, timeout=seconds + 30, check=True,
        )  # fmt: skip
        expected = 2 * (unbound_queries() - q0)
        seen = s0
        deadline = time.monotonic() + 15
        while kind != "capture" and time.monotonic() < deadline:  # drain
            seen = reader.seen()
            if seen - s0 >= expected:
                break
            time.sleep(0.5)
        cpu = reader.cpu() - c0
        if t is not None:
            t.join()
    finally:
        unbound.stop()
        captured = reader.stop()
    got = captured if kind == "capture" else seen - s0
    row: dict[str, object] = {
        "reader": kind,
        "expected_events": expected,
        "events": got,
        "lost_percent": round(100 * (expected - got) / expected, 2) if expected else None,
        "cpu_s": round(cpu, 2) if kind != "capture" else None,
        "events_per_cpu_s": round(got / cpu) if cpu > 0 and kind != "capture" else None,
    }
    if lat:
        row |= {
            "metrics_p50_ms": round(pct(lat, 50) * 1e3, 1),
            "metrics_p99_ms": round(pct(lat, 99) * 1e3, 1),
            "metrics_max_ms": round(max(lat) * 1e3, 1),
            "scrapes": len(lat),
        }
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=20000, help="queries per second")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    for tool in ("dnsperf", "fstrm_capture", "unbound"):
        if not shutil.which(tool):
            print(f"{tool} is not installed (make bench installs it)", file=sys.stderr)
            return 1
    kinds = ["dnsfleet", "capture"] + (["receiver"] if RECEIVER.exists() else [])
    if "receiver" not in kinds:
        print(f"{RECEIVER} missing: dnstap-receiver skipped", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="dnsfleet-bench-dnstap-"))
    rows = []
    for r in range(args.rounds):
        order = kinds if r % 2 == 0 else list(reversed(kinds))
        for kind in order:
            row = run(kind, args.rate, args.seconds, work / f"{r}-{kind}")
            row["round"] = r
            print(json.dumps(row), flush=True)
            rows.append(row)
    ours = [x for x in rows if x["reader"] == "dnsfleet"]
    peer = [x for x in rows if x["reader"] == "receiver"]
    if ours and peer and all(x["events_per_cpu_s"] for x in ours + peer):
        a = sum(float(str(x["events_per_cpu_s"])) for x in ours) / len(ours)
        b = sum(float(str(x["events_per_cpu_s"])) for x in peer) / len(peer)
        print(f"events per CPU-second, dnsfleet / dnstap-receiver: {a / b:.1f}x")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
