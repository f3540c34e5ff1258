"""selfmetrics.process_families: the process's memory is read anew every scrape through
/proc/self/statm held open; its start time, read once, is the process's."""

from __future__ import annotations

import os

import pytest

from dnsfleet import selfmetrics
from tests.harness import metrics
from tests.harness.metrics import of

pytestmark = pytest.mark.unit


def value(name: str) -> float:
    got = metrics.value(of(selfmetrics.process_families()), name)
    assert got is not None, name
    return got


def test_memory_is_read_anew_and_the_start_time_is_the_processes() -> None:
    before = value("process_resident_memory_bytes")
    block = bytearray(64 << 20)
    for k in range(0, len(block), 4096):  # touch every page: resident now
        block[k] = 1
    after = value("process_resident_memory_bytes")
    assert after - before >= 32 << 20, (before, after)
    assert value("process_virtual_memory_bytes") >= after
    del block
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
    assert selfmetrics._BOOT is not None
    start = selfmetrics._BOOT + ticks / selfmetrics.TICKS
    assert value("process_start_time_seconds") == start
    assert value("process_start_time_seconds") == start
