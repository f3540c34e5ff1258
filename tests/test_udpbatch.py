"""A /metrics batch's plain UDP probes through shared unconnected sockets (probes/udpbatch.py)
give every target what a socket of its own gave it: the answer, refused from ICMP at once,
a timeout, junk counted, spoofed answers from another port or with another ID ignored; a
send error or a full send buffer is one target's matter; a flood of junk at the shared
socket neither stalls the loop nor spoils the other targets' results."""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dnsfleet.config import Module, parse_address
from dnsfleet.probes import Reason, batchslot, query_for, sharedsock, udp, udpbatch
from dnsfleet.probes.result import Exchange
from tests.harness.loops import both
from tests.harness.loops import run as run_on
from tests.harness.servers import Blackhole, Unbound, answer, scripted
from tests.harness.tools import free_port

A = Module(name="a", query_name="www.example.test", query_type="A", timeout=1.0)
AAAA = Module(name="aaaa", query_name="www.example.test", query_type="AAAA", timeout=1.0)
LOCAL = Module(name="local", query_name="a.local.test", query_type="A", timeout=1.0)

Handler = Callable[[bytes, tuple[str, int], socket.socket], None]


def item(address: str, module: Module = A, timeout: float | None = None) -> udp.BatchItem:
    host, port, _ = parse_address(address)
    t = timeout or module.timeout
    if ":" in host:
        return ((host, port, 0, 0), socket.AF_INET6, query_for(module), t)
    return ((host, port), socket.AF_INET, query_for(module), t)


def run_batch(
    items: list[udp.BatchItem],
    *,
    concurrency: int = 8,
    tick: Callable[[float], None] | None = None,
    loop_kind: str = "asyncio",
) -> list[Exchange]:
    """The shared-socket batch's result per item; ``tick(loop time)`` every 10 ms meanwhile."""
    got: list[Exchange | None] = [None] * len(items)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handles: list[asyncio.TimerHandle] = []

        def beat() -> None:
            assert tick is not None
            tick(loop.time())
            handles.append(loop.call_later(0.01, beat))

        if tick is not None:
            beat()

        def on_result(i: int, ex: Exchange | None) -> None:
            assert got[i] is None, f"item {i} reported twice"
            got[i] = ex

        try:
            await udpbatch.exchange_many(
                items, deadline=loop.time() + 60, concurrency=concurrency, on_result=on_result
            )
        finally:
            for h in handles:
                h.cancel()

    run_on(main(), loop_kind)
    assert all(ex is not None for ex in got)
    return [ex for ex in got if ex is not None]


def run_single(items: list[udp.BatchItem], loop_kind: str = "asyncio") -> list[Exchange]:
    async def main() -> list[Exchange]:
        return [
            await udp.exchange(sockaddr=s, family=f, query=q, timeout=t) for s, f, q, t in items
        ]

    return run_on(main(), loop_kind)


class Peer:
    """A loopback UDP server whose handler sees the query, its source and the server's
    socket, to answer as a hostile or broken resolver would."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                data, src = self.sock.recvfrom(65535)
            except OSError:
                continue
            self.handler(data, src, self.sock)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def spoofer() -> Iterator[Peer]:
    """Answers each query rightly but from another port, and with another ID from the right
    one: a probe of it sees nothing that is its answer."""
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))

    def handler(q: bytes, src: tuple[str, int], sock: socket.socket) -> None:
        good = answer(q, "www.example.test. 60 IN A 192.0.2.66")
        other.sendto(good, src)
        sock.sendto((int.from_bytes(q[:2], "big") ^ 0x5A5A).to_bytes(2, "big") + good[2:], src)

    p = Peer(handler)
    yield p
    p.close()
    other.close()


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.integration
@both
def test_every_reason_as_a_socket_of_its_own_gives_it(
    loop_kind: str, unbound: Unbound, blackhole: Blackhole, spoofer: Peer
) -> None:
    def wrong_then_right(q: bytes) -> list[bytes]:
        good = answer(q, "www.example.test. 60 IN A 192.0.2.1")
        return [(int.from_bytes(q[:2], "big") ^ 1).to_bytes(2, "big") + good[2:], good]

    broken = b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x05ab"
    with (
        scripted(lambda q: [os.urandom(40)]) as junk,
        scripted(lambda q: [os.urandom(7), os.urandom(300)]) as garbage,
        scripted(wrong_then_right) as patient,
        scripted(lambda q: [q[:2] + broken]) as cut,
    ):
        items = [
            item(unbound.address),
            item(unbound.address, AAAA),  # the same address and port, another module
            item(unbound.address, LOCAL),
            item(f"127.0.0.1:{free_port()}"),
            item(blackhole.address, timeout=0.5),
            item(junk.address, timeout=0.5),
            item(garbage.address, timeout=0.5),
            item(patient.address),
            item(cut.address),
            item(spoofer.address, timeout=0.5),
        ]
        expected = [None, None, None, Reason.REFUSED, Reason.TIMEOUT]
        expected += [Reason.MALFORMED, Reason.MALFORMED, None, Reason.MALFORMED, Reason.MALFORMED]
        if has_ipv6_loopback():
            items.append(item(f"[::1]:{free_port()}"))
            expected.append(Reason.REFUSED)
        batch = run_batch(items, concurrency=4, loop_kind=loop_kind)
        single = run_single(items, loop_kind)
    assert [ex.error for ex in batch] == expected, [ex.detail for ex in batch]
    assert [ex.error for ex in single] == expected, [ex.detail for ex in single]
    assert [ex.detail for ex in batch] == [ex.detail for ex in single]
    answers = [ex.response.answer_rrs if ex.response else None for ex in batch]
    assert answers[:3] == [1, 0, 1] and answers[7] == 1
    # The refused port and the broken answer end at once, not at the timeout.
    assert batch[3].duration < 0.5 and batch[8].duration < 0.5


@pytest.mark.integration
def test_thousands_of_targets_on_one_resolver(unbound: Unbound) -> None:
    """2,000 probes to one address in flight 200 at a time: IDs unique per target and
    socket, each answer to its own probe (three modules, so three questions: a NODATA
    answer to AAAA must not reach a probe of A), refused ports among them stay refused."""
    modules = (A, AAAA, LOCAL)
    items = [item(unbound.address, modules[i % 3], timeout=10.0) for i in range(2000)]
    refused = list(range(7, 2000, 100))
    for i in refused:
        items[i] = item(f"127.0.0.1:{free_port()}", timeout=10.0)
    # Answers cached first: how unbound meets a herd of queries for names it has yet to
    # ask BIND (a SERVFAIL now and then, which it then serves from its cache for 5 s) is
    # unbound's own matter.
    for _ in range(60):
        warm = run_batch([item(unbound.address, m) for m in modules], concurrency=1)
        if all(ex.response is not None and ex.response.rcode == 0 for ex in warm):
            break
        time.sleep(0.2)
    got = run_batch(items, concurrency=200)
    for i, ex in enumerate(got):
        if i in refused:
            assert ex.error is Reason.REFUSED, (i, ex.detail)
        else:
            assert ex.error is None, (i, ex.detail)
            assert ex.response is not None
            assert ex.response.rcode == 0, (i, ex.response)
            assert ex.response.answer_rrs == (0 if modules[i % 3] is AAAA else 1)


class Flaky:
    """A shared socket whose first sends find the buffer full, and whose sends to one
    port fail as an unreachable network would."""

    def __init__(self, sock: socket.socket, full: int, unreachable_port: int) -> None:
        self._sock = sock
        self.full = full
        self.unreachable_port = unreachable_port

    def sendto(self, data: bytes, addr: Any) -> int:
        if addr[1] == self.unreachable_port:
            raise OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))
        if self.full > 0:
            self.full -= 1
            if self.full % 2:
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            raise OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS))
        return self._sock.sendto(data, addr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@pytest.mark.integration
def test_full_send_buffer_waits_and_a_send_error_is_one_targets(
    unbound: Unbound, monkeypatch: pytest.MonkeyPatch
) -> None:
    nowhere = free_port()
    made: list[Flaky] = []
    init = batchslot.Shared.__init__

    def flaky_init(self: batchslot.Shared, family: socket.AddressFamily, rcvbuf: int) -> None:
        init(self, family, rcvbuf)
        made.append(Flaky(self.sock, full=40, unreachable_port=nowhere))
        self.sock = made[-1]  # type: ignore[assignment]

    monkeypatch.setattr(batchslot.Shared, "__init__", flaky_init)
    items = [item(unbound.address, timeout=5.0) for _ in range(30)]
    items.insert(11, item(f"127.0.0.1:{nowhere}", timeout=5.0))
    got = run_batch(items, concurrency=30)
    assert made and all(f.full == 0 for f in made)  # every refusal was met, then sent again
    assert got[11].error is Reason.UNREACHABLE and got[11].detail == os.strerror(errno.ENETUNREACH)
    assert [ex.error for i, ex in enumerate(got) if i != 11] == [None] * 30


@pytest.mark.integration
def test_reader_drains_a_bounded_number_per_turn() -> None:
    """A flood already queued on the shared socket is read READ_BURST datagrams per
    readiness event, so other callbacks run between two turns."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        batch = udpbatch.SharedBatch(loop, [item("127.0.0.1:53")], loop.time() + 5, 1, print)
        try:
            pool = batch._pool(socket.AF_INET)
            assert isinstance(pool, list)
            shared = pool[0]
            dest = shared.sock.getsockname()
            if dest[1] == 0:  # not bound before its first send
                shared.sock.bind(("127.0.0.1", 0))
                dest = shared.sock.getsockname()
            shared.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
                for _ in range(udpbatch.READ_BURST * 3):
                    flood.sendto(os.urandom(40), dest)
            batch._readable(shared)
            left = 0
            for _ in range(udpbatch.READ_BURST * 4):
                try:
                    shared.sock.recv(100)
                except BlockingIOError:
                    break
                left += 1
            return left
        finally:
            batch.close()

    assert asyncio.run(main()) == udpbatch.READ_BURST * 2


FLOODER = """
import socket, sys, time
port = int(sys.stdin.readline())
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
sent, end = 0, time.monotonic() + float(sys.argv[1])
junk = bytes(range(256)) * 2
while time.monotonic() < end and sent < int(sys.argv[2]):
    for i in range(50):
        socks[i % 4].sendto(junk[: 12 + i], ("127.0.0.1", port))
    sent += 50
    time.sleep(0.005)
print(sent)
"""


@pytest.mark.integration
def test_hostile_neighbour_flooding_the_shared_socket(unbound: Unbound) -> None:
    """A target that, once probed, floods junk at the port its query came from (from other
    ports, and from its own as non-answers): the loop keeps its 10 ms beat, every other
    target's answer is right, the hostile one ends malformed."""
    flooder = subprocess.Popen(
        [sys.executable, "-c", FLOODER, "3", "60000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    told = threading.Event()

    def hostile(q: bytes, src: tuple[str, int], sock: socket.socket) -> None:
        for i in range(50):
            sock.sendto(os.urandom(2) + b"\x81\x80" + os.urandom(20 + i), src)
        if not told.is_set() and flooder.stdin is not None:
            told.set()
            flooder.stdin.write(f"{src[1]}\n")
            flooder.stdin.flush()

    peer = Peer(hostile)
    beats: list[float] = []
    try:
        items = [item(peer.address, timeout=3.0)]
        items += [item(unbound.address, (A, AAAA, LOCAL)[i % 3], timeout=10.0) for i in range(2000)]
        got = run_batch(items, concurrency=40, tick=beats.append)
        out, _ = flooder.communicate(timeout=60)
    finally:
        peer.close()
        if flooder.poll() is None:
            flooder.kill()
            flooder.wait()
    assert told.is_set() and int(out) > 0, "the flood never started"
    assert got[0].error is Reason.MALFORMED and "not an answer" in got[0].detail
    assert [ex.error for ex in got[1:]] == [None] * 2000, {ex.detail for ex in got[1:]}
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert len(beats) > 10 and max(gaps) < 2.0, max(gaps)


@pytest.mark.integration
def test_ipv4_mapped_target_as_a_socket_of_its_own_gives_it(unbound: Unbound) -> None:
    """``[::ffff:127.0.0.1]``: the config spells it ``::ffff:7f00:1``, recvfrom and the error
    queue ``::ffff:127.0.0.1``, and its ICMP errors are IPv4's (IP_RECVERR, not
    IPV6_RECVERR): matched by the config's spelling, its answer was dropped as a stranger's
    and its refusal never seen, both ending as timeouts."""
    port = unbound.address.rsplit(":", 1)[1]
    items = [item(f"[::ffff:127.0.0.1]:{port}"), item(f"[::ffff:127.0.0.1]:{free_port()}")]
    expected = [None, Reason.REFUSED]
    batch = run_batch(items)
    single = run_single(items)
    assert [ex.error for ex in single] == expected, [ex.detail for ex in single]
    assert [ex.error for ex in batch] == expected, [ex.detail for ex in batch]
    assert batch[1].duration < 0.5


@pytest.mark.unit
def test_zoned_ipv6_keeps_a_socket_of_its_own() -> None:
    # udpbatch.exchange_many sends these through udp.exchange_many (a socket per probe).
    assert sharedsock.shareable(("127.0.0.1", 53), socket.AF_INET)
    assert sharedsock.shareable(("::1", 53, 0, 0), socket.AF_INET6)
    assert not sharedsock.shareable(("fe80::1", 53, 0, 2), socket.AF_INET6)
    assert not sharedsock.shareable(("::ffff:7f00:1", 53, 0, 0), socket.AF_INET6)
    assert not sharedsock.shareable(("::ffff:127.0.0.1", 53, 0, 0), socket.AF_INET6)
    assert not sharedsock.shareable(("::7f00:1", 53, 0, 0), socket.AF_INET6)  # "::127.0.0.1"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("ancdata", "expected"),
    [
        ([(0, 11, struct.pack("=IBBBBII", errno.ECONNREFUSED, 2, 3, 3, 0, 0, 0))], 111),
        ([(41, 25, struct.pack("=IBBBBII", errno.EHOSTUNREACH, 3, 1, 3, 0, 0, 0))], 113),
        ([(0, 11, b"\x01\x00")], None),  # cut short
        ([(1, 29, b"\x00" * 16)], None),  # another control message (a timestamp)
        ([], None),
    ],
)
def test_icmp_errno_from_the_error_queue(
    ancdata: list[tuple[int, int, bytes]], expected: int | None
) -> None:
    assert sharedsock.icmp_errno(ancdata) == expected


@pytest.mark.integration
def test_a_pool_that_cannot_be_made_ends_each_probe_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sockets refused part way through a pool (EMFILE): the ones made are closed, and every
    probe of that family ends as a network error that names the refusal, once each."""
    made: list[socket.socket] = []

    def refusing(family: socket.AddressFamily, rcvbuf: int) -> socket.socket:
        if len(made) == 2:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        made.append(socket.socket(family, socket.SOCK_DGRAM))
        return made[-1]

    monkeypatch.setattr(batchslot, "open_socket", refusing)
    got = run_batch([item("127.0.0.1:53")] * 200, concurrency=100)
    assert len(made) == 2 and all(s.fileno() == -1 for s in made)
    detail = f"socket: {os.strerror(errno.EMFILE)}"
    assert {(ex.error, ex.detail) for ex in got} == {(Reason.NETWORK_ERROR, detail)}
