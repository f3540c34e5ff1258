"""How the shared-socket batch (probes/udpbatch.py) tells its answer from other datagrams of
the target, held beside a socket of its own: an empty datagram, one too short to carry an
ID, and IDs without a header are no answer (the probe keeps waiting and ends malformed,
counting them), whether the target has one probe on its socket or several (matched by ID
inline, or through the socket's dict)."""

from __future__ import annotations

import pytest

from dnsfleet.probes import Reason
from tests.harness.servers import answer, scripted
from tests.test_udpbatch import AAAA, LOCAL, A, item, run_batch, run_single

pytestmark = pytest.mark.integration


def test_short_datagrams_are_no_answer() -> None:
    with scripted(lambda q: [b"", q[:1], q[:2], q[:11]]) as short:
        items = [item(short.address, timeout=0.5)]
        batch = run_batch(items)
        single = run_single(items)
    for ex in (*batch, *single):
        assert ex.error is Reason.MALFORMED, ex.detail
        assert ex.detail.startswith("4 datagram(s) that were not an answer"), ex.detail


def test_several_probes_to_one_target_each_get_their_own_answer() -> None:
    """Three modules to one address, three times each, on the pool's one socket (nine
    probes): each answer matched by its ID to its own probe, a 1-octet datagram first."""

    def reply(q: bytes) -> list[bytes]:
        return [q[:1], answer(q, "www.example.test. 60 IN A 192.0.2.1")]

    with scripted(reply) as server:
        items = [item(server.address, m) for m in (A, AAAA, LOCAL) * 3]
        got = run_batch(items, concurrency=9)
    assert [ex.error for ex in got] == [None] * 9, [ex.detail for ex in got]
