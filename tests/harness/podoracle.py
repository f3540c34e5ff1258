"""The pod-view oracles and dnsfleet's walk, run in a pod namespace of the lab
(tests/harness/podlab.py): glibc's ``getent ahosts``, a getaddrinfo program built against
glibc and against musl, and dnsfleet.podview.driver; each run counted by what the lab's
backends got.

The getaddrinfo program times the call itself: on a loaded machine starting a process in a
namespace can take a tenth of a second or more, which a wait measured around ``getent``
would charge to the libc."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.podlab import PodLab
from tests.harness.tools import binary

# The pod view's waits match the libc's within this share (issue's "latency within 10 %").
LATENCY_TOLERANCE = 0.10

GAI_C = r"""
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
int main(int argc, char **argv) {
    struct addrinfo hints, *res = 0;
    struct timespec a, b;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;  /* as getent ahosts asks */
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = getaddrinfo(argv[1], 0, &hints, &res);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%d %.6f\n", rc, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
"""

DRIVE = """
import asyncio, json, socket, sys
from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.podview.driver import Server, lookup
from dnsfleet.podview.walk import Libc
conf = parse_resolv_conf(open("/etc/resolv.conf").read())
servers = tuple(Server(s.text, (s.address, 53), socket.AF_INET) for s in conf.servers)
r = asyncio.run(lookup(conf, sys.argv[1], Libc(sys.argv[2]), servers, budget=30))
print(json.dumps({"outcome": r.outcome.value, "duration": r.duration, "queries": r.queries,
                  "suffix": r.suffix, "nameserver": r.nameserver}))
"""


@dataclass(frozen=True)
class Run:
    text: str  # what the program printed
    wall: float  # seconds, measured around the process
    queries: int  # what the lab's backends got meanwhile

    def driver(self) -> dict[str, Any]:
        """dnsfleet's figures, from a DRIVE run."""
        out: dict[str, Any] = json.loads(self.text.strip().splitlines()[-1])
        return out

    def gai(self) -> tuple[int, float]:
        """The musl program's getaddrinfo result and the seconds it measured itself."""
        rc, secs = self.text.split()[:2]
        return int(rc), float(secs)


def build_gai(work: Path, libc: str = "musl") -> Path:
    """GAI_C linked statically against musl, or dynamically against the system's glibc."""
    gai = work / f"gai-{libc}"
    (work / "gai.c").write_text(GAI_C)
    cc = [binary("musl-gcc"), "-static"] if libc == "musl" else [binary("gcc")]
    subprocess.run(
        [*cc, "-O2", "-o", str(gai), str(work / "gai.c")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return gai


def _settled(lab: PodLab, before: int) -> int:
    """Queries that arrived since ``before``, once the logs have stopped growing."""
    last = -1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        now = lab.queries() - before
        if now == last:
            return now
        last = now
        time.sleep(0.3)
    return last


def run(lab: PodLab, pod: str, cmd: list[str]) -> Run:
    before = lab.queries()
    t0 = time.monotonic()
    out = subprocess.run(lab.pod_exec(pod, *cmd), capture_output=True, text=True, timeout=90)
    wall = time.monotonic() - t0
    return Run(out.stdout + out.stderr, wall, _settled(lab, before))


def getent(lab: PodLab, pod: str, name: str) -> Run:
    return run(lab, pod, [binary("getent"), "ahosts", name])


def gai(lab: PodLab, pod: str, program: Path, name: str) -> Run:
    """A getaddrinfo program of build_gai: ``Run.gai()`` is its result and its own time."""
    return run(lab, pod, [str(program), name])


def dnsfleet(lab: PodLab, pod: str, name: str, libc: str) -> Run:
    return run(lab, pod, [sys.executable, "-c", DRIVE, name, libc])


def walk_wait(lab: PodLab, pod: str, name: str, libc: str) -> float:
    """What dnsfleet's walk says the application waited, from a run of its own."""
    return float(dnsfleet(lab, pod, name, libc).driver()["duration"])


def least(first: float, again: Callable[[], float], *, near: float, tries: int = 3) -> float:
    """The least of up to ``tries`` measurements of one wait, stopping at the first within
    LATENCY_TOLERANCE above ``near``. A loaded machine only ever adds to a wait (a late
    wake-up, a slow process start), never takes from it: the least is the closest to what
    the libc or the walk itself waited."""
    best = first
    for _ in range(tries - 1):
        if best <= near * (1 + LATENCY_TOLERANCE):
            break
        best = min(best, again())
    return best
