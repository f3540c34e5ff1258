"""A service VIP in front of two CoreDNS backends, one of them silent (a hung pod still
listed as an endpoint), DNATed by the node as kube-proxy does (tests/harness/podlab.py:
nftables ``numgen``): conntrack pins every retry of one name to the backend its first
datagram went to, so a name sent to the silent backend fails after every wait, and the
next name of the walk, from a new source port, is balanced afresh (stubmodel.vip_pinned).

``conntrack -L`` in the node namespace shows it for glibc's getaddrinfo; then, with the
backends taken in turn (``numgen inc``, the silent one first) so that each client meets the
same choices, dnsfleet's walk and the model give what getent and musl did: the same queries
(exactly), the same outcome, the same wait (within 10 %). Waits are the getaddrinfo call's
own, timed inside its process (tests/harness/podoracle.py): starting a process in a
namespace on a loaded machine takes long enough to blur a 10 % comparison.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dnsfleet.stubmodel import vip_pinned
from tests.harness.podlab import DEAD, LIVE, SEARCH, SPLIT_VIP, Flow, PodLab, podlab
from tests.harness.podoracle import (
    LATENCY_TOLERANCE,
    build_gai,
    dnsfleet,
    gai,
    getent,
    least,
    walk_wait,
)

pytestmark = [pytest.mark.integration, pytest.mark.netns]

TIMEOUT, ATTEMPTS = 1, 2
SPLIT = (
    f"nameserver {SPLIT_VIP}\nsearch {SEARCH}\n"
    f"options ndots:5 timeout:{TIMEOUT} attempts:{ATTEMPTS}\n"
)
NAME = "www.example.test"
MAX_RUNS = 6  # random choices: enough runs to meet the silent backend (1 - 1/16 a run)


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PodLab, str, dict[str, Path]]]:
    work = tmp_path_factory.mktemp("podlab-vip")
    programs = {libc: build_gai(work, libc) for libc in ("glibc", "musl")}
    with podlab(work) as lab_:
        yield lab_, lab_.add_pod(SPLIT), programs


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
    lab: tuple[PodLab, str, dict[str, Path]],
) -> None:
    """kube-proxy's random choice: each name tried is one flow, pinned whichever way it went;
    the lookup waits the model's pinned cost once per name sent to the silent backend
    (glibc's getaddrinfo, as getent calls it, timed inside its process)."""
    podlab_, pod, programs = lab
    podlab_.split("random")
    cost = vip_pinned(backends=2, dead=1, timeout=TIMEOUT, attempts=ATTEMPTS).pinned_cost
    seen_dead = 0
    for _ in range(MAX_RUNS):
        podlab_.forget_flows()
        g = gai(podlab_, pod, programs["glibc"], NAME)
        flows = podlab_.flows(SPLIT_VIP)
        dead, datagrams = _check_pinned(flows, per_name=2 * ATTEMPTS)
        assert datagrams == g.queries, (flows, g)
        if dead:
            # The model's cost once per pinned name; never a further name's worth (a
            # loaded machine only adds to a wait: the exact comparison is the next test's).
            wait = g.gai()[1]
            assert dead * cost * (1 - LATENCY_TOLERANCE) <= wait < (dead + 1) * cost, (flows, g)
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
    lab: tuple[PodLab, str, dict[str, Path]], case: tuple[str, int, str, float]
) -> None:
    libc, queries, outcome, seconds = case
    podlab_, pod, programs = lab
    model = vip_pinned(backends=2, dead=1, timeout=TIMEOUT, attempts=ATTEMPTS, libc=libc)
    assert model.pinned_cost == seconds
    if libc == "glibc":
        podlab_.split("inc")
        podlab_.forget_flows()
        g = getent(podlab_, pod, NAME)
        flows = podlab_.flows(SPLIT_VIP)
        assert _check_pinned(flows, per_name=2 * ATTEMPTS) == (1, queries), flows
        assert g.queries == queries, g
        assert ("192.0.2.80" in g.text) == (outcome == "answer"), g
    # The libc's getaddrinfo again, timed inside its process.
    podlab_.split("inc")
    podlab_.forget_flows()
    oracle = gai(podlab_, pod, programs[libc], NAME)
    rc, oracle_wall = oracle.gai()

    def again(run: Callable[[], float]) -> float:
        podlab_.split("inc")
        podlab_.forget_flows()
        return run()

    oracle_flows = podlab_.flows(SPLIT_VIP)
    assert _check_pinned(oracle_flows, per_name=2 * ATTEMPTS) == (1, queries), oracle_flows
    assert oracle.queries == queries, oracle
    assert (rc == 0) == (outcome == "answer"), oracle
    # One name pinned to the silent backend: the model's cost, once.
    oracle_wall = least(
        oracle_wall,
        lambda: again(lambda: gai(podlab_, pod, programs[libc], NAME).gai()[1]),
        near=model.pinned_cost,
    )
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
    took = least(
        got["duration"],
        lambda: again(functools.partial(walk_wait, podlab_, pod, NAME, libc)),
        near=oracle_wall,
    )
    assert took == pytest.approx(oracle_wall, rel=LATENCY_TOLERANCE), (got, oracle)
