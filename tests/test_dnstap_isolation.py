"""The dnstap ingest isolated from what goes wrong around it: messages with attacker-sized
fields leave its memory bounded in bytes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dnsfleet.dnstap import aggregate
from dnsfleet.dnstap.aggregate import Aggregator
from dnsfleet.dnstap.client import Ingest, IngestUnavailable
from dnsfleet.dnstap.framestreams import DATA_MAX
from dnsfleet.dnstap.message import parse_frame
from dnsfleet.exposition import Family
from tests.harness.dnstapwriter import Writer, ingest_settings, pair

Counts = dict[tuple[str, str], float]


def counts(fams: list[Family]) -> Counts:
    return {(f.name + s, lab): v for f in fams for s, lab, v in f.samples}


def read(ing: Ingest) -> Counts:
    return counts(asyncio.run(asyncio.wait_for(ing.families(), 60)))


def wait_for(ing: Ingest, key: tuple[str, str], want: float, timeout: float = 60) -> Counts:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(IngestUnavailable):
            s = read(ing)
            if s.get(key) == want:
                return s
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} never reached {want}")
        time.sleep(0.05)


def responses(s: Counts) -> float:
    return sum(v for (n, _), v in s.items() if n == "dnsfleet_dnstap_responses_total")


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "dnstap.sock"


@pytest.fixture
def closing() -> Iterator[list[Ingest]]:
    made: list[Ingest] = []
    yield made
    for ing in made:
        ing.close()


# ------------------------------------------------------------------- memory


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.integration
def test_huge_client_addresses_leave_the_memory_bounded(sock: Path, closing: list[Ingest]) -> None:
    """3,000 CLIENT_QUERY messages whose query_address fills the frame (256 KiB less the
    rest of the message): the ingest keeps none of those bytes."""
    ing = Ingest(ingest_settings(sock, max_connections=4))
    closing.append(ing)
    d: Any = parse_frame(pair("a.test.")[0])
    d.message.query_address = b"\xab" * (DATA_MAX - 512)
    w = Writer(str(sock), timeout=60)
    w.handshake()
    for i in range(3000):
        d.message.query_port = 10_000 + i
        frame = d.SerializeToString()
        assert len(frame) <= DATA_MAX
        w.send(frame)
    assert w.stop()
    s = wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 3000)
    assert s[("dnsfleet_dnstap_pending_queries", "")] == 3000
    assert rss_bytes(ing.proc.pid) < 100 * 1024 * 1024


def _query_frames(n: int) -> list[bytes]:
    d: Any = parse_frame(pair("a.test.")[0])
    d.message.query_address = bytes(range(16))
    out = []
    for i in range(n):
        d.message.query_port = i
        d.message.query_time_sec = 1_700_000_000 + i
        out.append(d.SerializeToString())
    return out


@pytest.mark.unit
def test_a_full_matching_table_stays_within_its_byte_budget() -> None:
    batch = _query_frames(aggregate.PENDING_MAX + 1000)
    agg = Aggregator({})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        agg.ingest(batch)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(agg.pending) == aggregate.PENDING_MAX and agg.evicted == 1000
    assert held <= aggregate.PENDING_BYTES


@pytest.mark.unit
@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        (bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1])),
        (bytes(16), bytes(16)),
        (b"", b""),
        (b"\x01\x02\x03", b""),
        (b"x" * 200_000, b""),
    ],
)
def test_a_client_address_is_its_4_or_16_bytes_or_nothing(raw: bytes, kept: bytes) -> None:
    assert aggregate.client_address(raw) == kept


@pytest.mark.unit
def test_identities_are_cached_by_their_first_64_bytes() -> None:
    agg = Aggregator({})
    for i in range(100):
        agg.target(b"r" * 100_000 + str(i).encode())
    assert [len(k) for k in agg._targets] == [aggregate.MAX_IDENTITY_LEN]
