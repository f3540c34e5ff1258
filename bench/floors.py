"""The floors beside the exporters, as CPU per answered query, sending the query dnsfleet's
default UDP module sends (EDNS, 1232-byte payload, NSID asked) to the same unbound:

* dnsperf (Debian): its own CPU (utime + stime of the process, from wait4) per query it
  saw answered, one thread, the query read in binary form (``-B``) so it is byte for byte
  the exporter's (dnsperf sets the ID);
* a bare Python loop: a non-blocking UDP socket per query, connected to one of the
  targets' addresses in turn (a fresh source port per query, as a probe needs), the query
  sent, the answers read from one epoll, each socket closed; the CPU of this process per
  answered query. Bounded in queries and seconds.

Nothing an exporter does per probe can cost less than its share of the second, so the
distance from it is what HTTP, the verdict and the exposition cost."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import select
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.fleet import QNAME
from dnsfleet.dnswire import build_query


@dataclass(frozen=True)
class Floor:
    queries: int  # answered
    cpu: float  # seconds

    @property
    def cpu_per_query(self) -> float:
        return self.cpu / max(self.queries, 1)


def query_wire() -> bytes:
    return build_query(QNAME, 1).wire  # A, as the bench module asks


def dnsperf(work: Path, port: int, *, seconds: int) -> Floor:
    """dnsperf against the unbound's 127.0.0.1 for ``seconds``; its CPU per answer."""
    data = work / "dnsperf.bin"
    wire = query_wire()
    data.write_bytes(struct.pack("!H", len(wire)) + wire)
    cmd = ["dnsperf", "-B", "-d", str(data), "-s", "127.0.0.1", "-p", str(port)]
    cmd += ["-l", str(seconds), "-T", "1", "-c", "1", "-q", "100", "-t", "2"]
    with open(work / "dnsperf.out", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + seconds + 30
        while True:  # wait4 gives the child's own rusage; bounded by the deadline
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("dnsperf did not end")
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)
    text = (work / "dnsperf.out").read_text()
    m = re.search(r"Queries completed:\s+(\d+)", text)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"dnsperf failed:\n{text[-2000:]}")
    return Floor(int(m.group(1)), usage.ru_utime + usage.ru_stime)


def socket_loop(
    addresses: list[str], port: int, *, queries: int, seconds: float, batch: int = 500
) -> Floor:
    """Up to ``queries`` queries (and ``seconds``), ``batch`` in flight, through
    ``addresses`` in turn; answers whose ID matches count."""
    wire = query_wire()
    answered = sent = 0
    ep = select.epoll()
    deadline = time.monotonic() + seconds
    t0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        while sent < queries and time.monotonic() < deadline:
            inflight: dict[int, tuple[socket.socket, bytes]] = {}
            for _ in range(min(batch, queries - sent)):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
                qid = struct.pack("!H", sent & 0xFFFF)
                s.connect((addresses[sent % len(addresses)], port))
                s.send(qid + wire[2:])
                ep.register(s.fileno(), select.EPOLLIN)
                inflight[s.fileno()] = (s, qid)
                sent += 1
            answered += _drain(ep, inflight, deadline=min(deadline, time.monotonic() + 5))
    finally:
        ep.close()
    t1 = resource.getrusage(resource.RUSAGE_SELF)
    return Floor(answered, (t1.ru_utime - t0.ru_utime) + (t1.ru_stime - t0.ru_stime))


def _drain(
    ep: select.epoll, inflight: dict[int, tuple[socket.socket, bytes]], *, deadline: float
) -> int:
    """Read answers until every socket of the batch answered or the deadline; close all."""
    answered = 0
    try:
        while inflight and time.monotonic() < deadline:
            for fd, _ in ep.poll(max(0.0, deadline - time.monotonic()), len(inflight)):
                s, qid = inflight.pop(fd)
                with contextlib.suppress(OSError):  # refused: not answered
                    answered += s.recv(4096)[:2] == qid
                s.close()  # closing the only descriptor takes it out of the epoll too
    finally:
        for s, _ in inflight.values():
            s.close()
    return answered
