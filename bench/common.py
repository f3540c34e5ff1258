"""Shared helpers for the benchmarks: process CPU and memory from /proc, a bounded HTTP load
loop. Benchmarks only ever talk to loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass

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
