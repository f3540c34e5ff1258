"""The dnstap ingest isolated from what goes wrong around it: a request cancelled mid-reply,
a process killed or frozen, writers that connect and stay silent, messages with
attacker-sized fields, a TCP listener, and its logs. Each leaves the next scrape whole and
the real writers counted."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dnsfleet import logs
from dnsfleet.dnstap import aggregate
from dnsfleet.dnstap.aggregate import Aggregator
from dnsfleet.dnstap.client import Ingest, IngestUnavailable, log_arguments
from dnsfleet.dnstap.framestreams import CONTENT_TYPE, DATA_MAX, START, STOP, encode_control
from dnsfleet.dnstap.message import parse_frame
from dnsfleet.exposition import Family
from tests.harness.dnstapwriter import Writer, frames, ingest_settings, pair
from tests.harness.inprocess import exporter, scrape
from tests.harness.metrics import matching
from tests.harness.tools import binary, num

Counts = dict[tuple[str, str], float]


def counts(fams: list[Family]) -> Counts:
    return {(f.name + s, lab.text): v for f in fams for s, lab, v in f.samples}


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


# ------------------------------------------------------------------- the channel


@pytest.mark.integration
def test_a_cancelled_reply_leaves_the_next_request_whole(sock: Path, closing: list[Ingest]) -> None:
    """Scrapes that give up mid-reply, and event loops closed under a request: the next
    request gets the whole reply, the counts right, and the process was never restarted."""
    ing = Ingest(ingest_settings(sock, identities={}))
    closing.append(ing)
    qtypes = [*aggregate.QTYPES.values(), "TYPE65000"]
    # Several hundred KB of reply (32 targets x 11 rcodes x 18 types): a read is cut inside.
    sent = [
        pair("a.test.", qt, rc, identity=f"id-{i}".encode(), qid=rc)[1]
        for i, rc, qt in itertools.product(range(32), range(11), qtypes)
    ]
    w = Writer(str(sock))
    w.handshake()
    w.send(*sent)
    assert w.stop()
    s = wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), len(sent))
    assert len(asyncio.run(ing.reply()).encode()) > 256 * 1024

    async def give_up_often() -> list[Family]:
        for i in range(60):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ing.families(), 0.0005 * (i % 20 + 1))
        return await asyncio.wait_for(ing.families(), 60)

    assert responses(counts(asyncio.run(give_up_often()))) == len(sent)
    for i in range(30):  # asyncio.run cancels the request itself when its loop closes
        with contextlib.suppress(TimeoutError):
            asyncio.run(asyncio.wait_for(ing.families(), 0.001 * (i % 10 + 1)))
    s = read(ing)
    assert responses(s) == len(sent)
    assert s[("dnsfleet_dnstap_frames_total", "")] == len(sent)
    assert ing.alive() and ing.starts == 1


@pytest.mark.integration
def test_a_killed_ingest_is_started_again_and_counts(sock: Path, tmp_path: Path) -> None:
    exp = exporter(
        tmp_path,
        {
            # An identity names a configured target; nothing listens at its address, so
            # its probes are refused at once.
            "modules": {"m": {"query_name": "a.test", "timeout": "1s"}},
            "targets": [{"address": "127.0.0.1:53", "module": "m"}],
            "dnstap": {"socket": str(sock), "identities": {"r1": "127.0.0.1:53"}},
        },
    )
    try:
        ingest = exp.collector_state["dnstap"]
        assert isinstance(ingest, Ingest)
        Writer(str(sock)).close()  # listening
        first = ingest.proc
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        deadline = time.monotonic() + 60
        while True:
            s = scrape(exp)
            if num(matching(s, "dnsfleet_dnstap_ingest_up")) == 1:
                break
            assert time.monotonic() < deadline, "the ingest never answered again"
            time.sleep(0.2)
        assert ingest.proc is not first
        assert num(matching(s, "dnsfleet_dnstap_ingest_restarts_total", reason="exited")) == 1
        assert num(matching(s, "dnsfleet_dnstap_ingest_restarts_total", reason="unresponsive")) == 0
        assert num(matching(s, "dnsfleet_dnstap_ingest_starts_total")) == 2
        w = Writer(str(sock))
        w.handshake()
        for i in range(50):
            w.send(*pair("a.test.", rcode=2, qid=i, port=5000 + i))
        assert w.stop()
        deadline = time.monotonic() + 60
        while True:
            s = scrape(exp)
            got = matching(s, "dnsfleet_dnstap_servfail_total", target="127.0.0.1:53", ede="none")
            if got == 50 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got == 50
    finally:
        exp.close()


@pytest.mark.integration
def test_a_frozen_ingest_is_killed_and_started_again(sock: Path, closing: list[Ingest]) -> None:
    ing = Ingest(ingest_settings(sock), answer_timeout=2.0)
    closing.append(ing)
    # Answering first: on a loaded machine the new process may take longer than the 2 s
    # answer timeout to import and listen.
    wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 0)
    frozen = ing.proc
    os.kill(frozen.pid, signal.SIGSTOP)
    with pytest.raises(IngestUnavailable, match="no answer within 2 s"):
        read(ing)
    ing.ensure()
    assert frozen.wait(timeout=30) == -signal.SIGKILL
    assert ing.restarts == {"exited": 0, "unresponsive": 1} and ing.starts == 2
    w = Writer(str(sock))
    w.handshake()
    w.send(*pair("a.test."))
    assert w.stop()
    wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 2)


@pytest.mark.integration
def test_a_process_that_keeps_exiting_is_restarted_with_a_growing_backoff(
    tmp_path: Path, closing: list[Ingest]
) -> None:
    """It cannot listen (no such directory) and exits every time: restarted at once the
    first time, then 1 s, 2 s, 4 s apart at the soonest, however often it is ensured."""
    ing = Ingest(ingest_settings(tmp_path / "missing" / "dnstap.sock"))
    closing.append(ing)
    assert ing.proc.wait(timeout=60) == 1
    ing.ensure()
    assert ing.restarts["exited"] == 1  # at once
    start = time.monotonic()
    while time.monotonic() - start < 4.0:
        ing.ensure()
        time.sleep(0.02)
    # Backoffs of 1 s then 2 s: at most two more within 4 s, whatever the machine's speed.
    assert ing.restarts == {"exited": ing.restarts["exited"], "unresponsive": 0}
    assert 1 <= ing.restarts["exited"] <= 3
    assert ing.starts == ing.restarts["exited"] + 1


# ------------------------------------------------------------------- writers


def fstrm_file(path: Path, payloads: list[bytes]) -> None:
    """A Frame Streams file (fstrm_capture's format): START, the frames, STOP."""
    path.write_bytes(
        encode_control(START, (CONTENT_TYPE,)) + frames(*payloads) + encode_control(STOP)
    )


@pytest.mark.integration
def test_silent_writers_never_lock_out_a_real_one(
    sock: Path, tmp_path: Path, closing: list[Ingest]
) -> None:
    """64 writers take every slot with a handshake and then say nothing; fstrm_replay
    (libfstrm's writer) still gets a slot, and each of its messages is counted."""
    ing = Ingest(ingest_settings(sock, max_connections=64, idle_timeout=60, handshake_timeout=60))
    closing.append(ing)
    silent = [Writer(str(sock), timeout=30) for _ in range(64)]
    try:
        for w in silent:
            w.handshake()
        wait_for(ing, ("dnsfleet_dnstap_connections", ""), 64)
        time.sleep(1.5)  # idle for longer than the eviction's one second
        n = 300
        capture = tmp_path / "real.fstrm"
        fstrm_file(capture, [f for i in range(n) for f in pair("b.test.", qid=i, port=7000 + i)])
        subprocess.run(
            [binary("fstrm_replay"), "-t", CONTENT_TYPE.decode(), "-u", str(sock),
             "-r", str(capture)],
            check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        s = wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 2 * n)
        assert responses(s) == n
        assert s[("dnsfleet_dnstap_errors_total", 'reason="idle_evicted"')] == 1
        assert s[("dnsfleet_dnstap_errors_total", 'reason="too_many_connections"')] == 0
        assert s[("dnsfleet_dnstap_connections_total", "")] == 65
    finally:
        for w in silent:
            w.close()


@pytest.mark.integration
def test_silent_writers_never_evict_a_quiet_resolver(sock: Path, closing: list[Ingest]) -> None:
    """A resolver's stream has carried frames and then been quiet for over a second (a quiet
    hour); 64 writers connect and say nothing. The one evicted for the last of them is a
    silent one: the resolver keeps its slot, and what it writes next is counted. Before,
    the longest-idle stream was evicted whoever it was, the resolver's first."""
    ing = Ingest(ingest_settings(sock, max_connections=64, idle_timeout=60, handshake_timeout=60))
    closing.append(ing)
    resolver = Writer(str(sock), timeout=30)
    resolver.handshake()
    resolver.send(*pair("a.test.", qid=1))
    wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 2)
    silent = [Writer(str(sock), timeout=30) for _ in range(63)]
    try:
        for w in silent:
            w.handshake()
        time.sleep(1.5)  # everyone idle for longer than the eviction's one second
        late = Writer(str(sock), timeout=30)
        silent.append(late)
        late.handshake()
        s = wait_for(ing, ("dnsfleet_dnstap_errors_total", 'reason="idle_evicted"'), 1)
        assert s[("dnsfleet_dnstap_connections", "")] == 64
        resolver.send(*pair("a.test.", qid=2, port=40001))
        assert resolver.stop()
        s = wait_for(ing, ("dnsfleet_dnstap_frames_total", ""), 4)
        assert responses(s) == 2
    finally:
        for w in silent:
            w.close()


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


# ------------------------------------------------------------------- logs


@pytest.mark.unit
def test_the_ingest_is_told_the_exporters_log_format() -> None:
    root = logging.getLogger()
    level = root.level
    try:
        logs.setup(level="debug", fmt="json")
        assert log_arguments() == ["--log.format", "json", "--log.level", "debug"]
        logs.setup(level="warn", fmt="logfmt")
        assert log_arguments() == ["--log.format", "logfmt", "--log.level", "warn"]
    finally:
        for h in root.handlers[:]:
            if isinstance(h, logs._Handler):
                root.removeHandler(h)
        root.setLevel(level)


def run_ingest(settings: str, *flags: str) -> subprocess.CompletedProcess[str]:
    ours, theirs = socket.socketpair()
    try:
        return subprocess.run(
            [sys.executable, "-m", "dnsfleet.dnstap.ingest", "--control-fd",
             str(theirs.fileno()), *flags, settings],
            pass_fds=(theirs.fileno(),), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        ours.close()
        theirs.close()


@pytest.mark.integration
def test_the_ingest_logs_json_records_never_a_raw_traceback(
    sock: Path, closing: list[Ingest]
) -> None:
    live = Ingest(ingest_settings(sock))
    closing.append(live)
    Writer(str(sock)).close()  # listening: a second process cannot take the socket
    taken = run_ingest(ingest_settings(sock).encode(), "--log.format", "json")
    broken = run_ingest("{not json", "--log.format", "json")
    for done in (taken, broken):
        assert done.returncode == 1
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        record = json.loads(lines[0])
        assert record["level"] == "error"
    assert "another process listens on it" in json.loads(taken.stderr)["msg"]
    assert "JSONDecodeError" in json.loads(broken.stderr)["err"]
