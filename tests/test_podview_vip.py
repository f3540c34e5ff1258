"""A service VIP in front of two CoreDNS backends, one of them silent (a hung pod still
listed as an endpoint), DNATed by the node as kube-proxy does (tests/harness/podlab.py:
nftables ``numgen``): conntrack pins every retry of one name to the backend its first
datagram went to, so a name sent to the silent backend fails after every wait, and the
next name of the walk, from a new source port, is balanced afresh (stubmodel.vip_pinned).

``conntrack -L`` in the node namespace shows it for glibc's ``getent ahosts``; then, with
the backends taken in turn (``numgen inc``, the silent one first) so that each client meets
the same choices, dnsfleet's walk and the model give what getent and musl did: the same
queries (exactly), the same outcome, the same wait (within 10 %).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet.stubmodel import vip_pinned
from tests.harness.podlab import DEAD, LIVE, SEARCH, SPLIT_VIP, Flow, PodLab, podlab
from tests.harness.podoracle import build_gai, dnsfleet, getent, musl

pytestmark = [pytest.mark.integration, pytest.mark.netns]

TIMEOUT, ATTEMPTS = 1, 2
SPLIT = (
    f"nameserver {SPLIT_VIP}\nsearch {SEARCH}\n"
    f"options ndots:5 timeout:{TIMEOUT} attempts:{ATTEMPTS}\n"
)
NAME = "www.example.test"
LATENCY_TOLERANCE = 0.10
MAX_RUNS = 6  # random choices: enough runs to meet the silent backend (1 - 1/16 a run)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PodLab, str, Path]]:
    work = tmp_path_factory.mktemp("podlab-vip")
    gai = build_gai(work)
    with podlab(work) as lab_:
        yield lab_, lab_.add_pod(SPLIT), gai


def _check_pinned(flows: list[Flow], *, per_name: int) -> tuple[int, int]:
    """Every flow went to one backend: the silent one got all ``per_name`` datagrams of its
    name (every retry) and answered none, the live one answered its A and AAAA. Returns
    (flows pinned to the silent backend, datagrams in all)."""
    dead = [f for f in flows if f.backend == DEAD]
    live = [f for f in flows if f.backend == LIVE]
    assert len(dead) + len(live) == len(flows), flows
    assert all(f.packets == per_name and not f.replied for f in dead), flows
    assert all(f.packets == 2 and f.replied for f in live), flows
    return len(dead), sum(f.packets for f in flows)


def test_conntrack_pins_glibc_retries_to_the_silent_backend(
    lab: tuple[PodLab, str, Path],
) -> None:
    """kube-proxy's random choice: each name tried is one flow, pinned whichever way it went;
    the lookup waits the model's pinned cost once per name sent to the silent backend."""
    podlab_, pod, _ = lab
    podlab_.split("random")
    cost = vip_pinned(backends=2, dead=1, timeout=TIMEOUT, attempts=ATTEMPTS).pinned_cost
    seen_dead = 0
    for _ in range(MAX_RUNS):
        podlab_.forget_flows()
        g = getent(podlab_, pod, NAME)
        flows = podlab_.flows(SPLIT_VIP)
        dead, datagrams = _check_pinned(flows, per_name=2 * ATTEMPTS)
        assert datagrams == g.queries, (flows, g)
        if dead:
            assert g.wall == pytest.approx(dead * cost, rel=LATENCY_TOLERANCE), (flows, g)
            seen_dead += 1
        if seen_dead >= 2:
            break
    assert seen_dead, f"no name went to the silent backend in {MAX_RUNS} lookups"


# (libc, queries, outcome, seconds): the first name (the first search domain) goes to the
# silent backend; glibc waits timeout x attempts on it, leaves the search list (a timeout
# ends it) and gets the name as is from the live backend; musl gives up after its timeout.
IN_TURN = [("glibc", 6, "answer", 2.0), ("musl", 4, "timeout", 1.0)]


@pytest.mark.parametrize("case", IN_TURN, ids=[c[0] for c in IN_TURN])
def test_pod_view_and_model_meet_the_libc_behind_the_vip(
    lab: tuple[PodLab, str, Path], case: tuple[str, int, str, float]
) -> None:
    libc, queries, outcome, seconds = case
    podlab_, pod, gai = lab
    model = vip_pinned(backends=2, dead=1, timeout=TIMEOUT, attempts=ATTEMPTS, libc=libc)
    assert model.pinned_cost == seconds
    podlab_.split("inc")
    podlab_.forget_flows()
    if libc == "glibc":
        oracle = getent(podlab_, pod, NAME)
        oracle_wall, answered = oracle.wall, "192.0.2.80" in oracle.text
    else:
        oracle = musl(podlab_, pod, gai, NAME)
        rc, oracle_wall = oracle.gai()
        answered = rc == 0
    oracle_flows = podlab_.flows(SPLIT_VIP)
    assert _check_pinned(oracle_flows, per_name=2 * ATTEMPTS) == (1, queries), oracle_flows
    assert oracle.queries == queries, oracle
    assert answered == (outcome == "answer"), oracle
    # One name pinned to the silent backend: the model's cost, once.
    assert oracle_wall == pytest.approx(model.pinned_cost, rel=LATENCY_TOLERANCE), oracle

    podlab_.split("inc")
    podlab_.forget_flows()
    d = dnsfleet(podlab_, pod, NAME, libc)
    got = d.driver()
    flows = podlab_.flows(SPLIT_VIP)
    assert _check_pinned(flows, per_name=2 * ATTEMPTS) == (1, queries), flows
    assert (d.queries, got["queries"]) == (queries, queries), (got, d)
    assert got["outcome"] == outcome, got
    assert got["nameserver"] == (SPLIT_VIP if outcome == "answer" else ""), got
    assert got["duration"] == pytest.approx(oracle_wall, rel=LATENCY_TOLERANCE), (got, oracle)
