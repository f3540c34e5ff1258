"""Shared helpers for the benchmarks: process CPU and memory from /proc, a bounded HTTP load
loop, wrk windows (one URL, or a Lua script cycling through many), starting a peer and
checking what it answers, min-median-max over rounds. Benchmarks only ever talk to loopback."""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its reaped children, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[11..14] = utime stime cutime cstime (stat(5) fields 14-17)
    return sum(int(x) for x in fields[11:15]) / TICK


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@dataclass
class LoadResult:
    requests: int
    errors: int
    wall: float
    cpu: float  # CPU seconds of the measured process

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / max(self.requests, 1)

    @property
    def rate(self) -> float:
        return self.requests / self.wall if self.wall else 0.0


async def _load(
    url: str, *, requests: int, concurrency: int, check: str | None, deadline: float
) -> tuple[int, int]:
    done = errors = 0
    queue = iter(range(requests))
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            nonlocal done, errors
            for _ in queue:
                if time.monotonic() > deadline:
                    return
                try:
                    async with session.get(url) as resp:
                        body = await resp.text()
                        if resp.status != 200 or (check and check not in body):
                            errors += 1
                except (TimeoutError, aiohttp.ClientError):
                    errors += 1
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, errors


def load(
    url: str,
    pid: int,
    *,
    requests: int,
    concurrency: int = 8,
    check: str | None = None,
    max_seconds: float = 120.0,
) -> LoadResult:
    """Send at most ``requests`` GETs (and for at most ``max_seconds``), measuring ``pid``."""
    cpu0 = cpu_seconds(pid)
    t0 = time.monotonic()
    done, errors = asyncio.run(
        _load(
            url, requests=requests, concurrency=concurrency, check=check, deadline=t0 + max_seconds
        )
    )
    wall = time.monotonic() - t0
    return LoadResult(done, errors, wall, cpu_seconds(pid) - cpu0)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


PROMETHEUS_HEADERS = (
    "-H",
    "Accept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "-H",
    "Accept-Encoding: gzip",
    "-H",
    "X-Prometheus-Scrape-Timeout-Seconds: 10",
)


def target_addresses(n: int) -> list[str]:
    """n distinct loopback addresses (127.0.1.1 ... 127.0.40.250 for 10,000)."""
    return [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(n)]


def spawn(cmd: list[str], url: str, log: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with its output in ``log``; return once ``url`` answers."""
    f = open(log, "wb")  # noqa: SIM115 (the process owns it for its life)
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_http(url)
    except RuntimeError:
        stop(proc)
        raise
    return proc


def check(url: str, needle: str) -> str:
    """GET ``url``; fail unless the body says ``needle``. Returns the body."""
    with urllib.request.urlopen(url, timeout=60) as r:
        body: str = r.read().decode()
    if needle not in body:
        raise RuntimeError(f"{url} did not say {needle!r}:\n{body[:2000]}")
    return body


@dataclass
class Window:
    requests: int
    cpu: float  # seconds of the measured process
    seconds: float

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / max(self.requests, 1)


def cycling_script(path: Path, paths: Sequence[str]) -> Path:
    """A wrk Lua script whose requests go through ``paths`` in turn (one wrk thread: one
    Lua state, so each path is asked once per pass)."""
    table = ",\n".join(f'  "{p}"' for p in paths)
    path.write_text(
        f"local paths = {{\n{table}\n}}\nlocal n = #paths\nlocal i = 0\n"
        "request = function()\n  i = i % n + 1\n  return wrk.format(nil, paths[i])\nend\n"
    )
    return path


def wrk(
    url: str,
    pid: int,
    *,
    seconds: int,
    connections: int,
    extra: tuple[str, ...] = (),
    script: Path | None = None,
) -> Window:
    """``wrk -t1 -c<connections>`` for ``seconds`` (through ``script``'s paths when given);
    the CPU ``pid`` spent meanwhile. Any non-2xx answer or socket error fails the bench."""
    lua = ("-s", str(script)) if script else ()
    cpu0 = cpu_seconds(pid)
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "15s", *lua, *extra]
    out = subprocess.run(
        [*cmd, url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    cpu = cpu_seconds(pid) - cpu0
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not m:
        raise RuntimeError(f"wrk said:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if bad or errors:
        raise RuntimeError(f"errors under load against {url}:\n{out}")
    return Window(int(m.group(1)), cpu, seconds)


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f}, "
        f"min {min(values):.2f}, max {max(values):.2f} over {len(values)}"
    )


def mmm(values: Sequence[float], fmt: str = ".2f") -> str:
    """min-median-max of the rounds, as the summary prints them."""
    if not values:
        return "-"
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{lo:{fmt}}-{mid:{fmt}}-{hi:{fmt}}"
