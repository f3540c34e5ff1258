"""The failover model's arithmetic (real glibc checks it in test_stub_oracle.py)."""

from __future__ import annotations

import pytest

from dnsfleet.collectors.stub import FileReport
from dnsfleet.config import ResolvConfWatch
from dnsfleet.failover import render_report
from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.stubmodel import (
    ServerOutcome,
    ServerState,
    glibc,
    glibc_waits,
    model,
    musl,
    tcp_connect_timeout,
    vip_pinned,
)

pytestmark = pytest.mark.unit

A = ServerOutcome(ServerState.ANSWERING)
S = ServerOutcome(ServerState.SILENT)
R = ServerOutcome(ServerState.REFUSED, 0.0002)
F = ServerOutcome(ServerState.SERVFAIL, 0.01)
U = ServerOutcome(ServerState.UNREACHABLE, 3.0)  # e.g. ARP gave up after 3 s


@pytest.mark.parametrize(
    ("timeout", "n", "want"),
    [
        (5, 1, (5,)),
        (5, 2, (5, 5)),
        (5, 3, (5, 3, 6)),
        (1, 3, (1, 1, 1)),
        (2, 3, (2, 1, 2)),
        (3, 3, (3, 2, 4)),
        (30, 3, (30, 20, 40)),
        (0, 3, (1, 1, 1)),
        (-2, 2, (1, 1)),
    ],
)
def test_glibc_waits(timeout: int, n: int, want: tuple[int, ...]) -> None:
    assert glibc_waits(timeout, n) == want


def test_first_server_answers_costs_nothing() -> None:
    v = glibc((A, S, S), timeout=5, attempts=2)
    assert (v.delay, v.failing) == (0.0, False)


def test_default_timeout_blackholed_first_server() -> None:
    v = glibc((S, A), timeout=5, attempts=2)
    assert (v.delay, v.failing) == (5.0, False)


def test_refused_and_servfail_move_on_at_once() -> None:
    v = glibc((R, F, A), timeout=5, attempts=2)
    assert v.delay == pytest.approx(0.0102)
    assert not v.failing


def test_unreachable_costs_until_the_error_but_at_most_the_wait() -> None:
    assert glibc((U, A), timeout=5, attempts=2).delay == 3.0
    assert glibc((U, A), timeout=2, attempts=2).delay == 2.0


def test_three_servers_use_the_shifted_waits() -> None:
    assert glibc((S, S, A), timeout=5, attempts=2).delay == 8.0  # 5 + 3
    assert glibc((R, S, A), timeout=5, attempts=2).delay == pytest.approx(3.0002)


def test_all_silent_fails_after_every_round() -> None:
    v = glibc((S, S, S), timeout=5, attempts=2)
    assert v.failing
    assert v.delay == 2 * (5 + 3 + 6)


def test_all_refused_fails_at_once() -> None:
    v = glibc((R, R), timeout=5, attempts=3)
    assert v.failing and v.delay == pytest.approx(3 * 0.0004)


def test_attempts_zero_fails_without_sending() -> None:
    v = glibc((A,), timeout=5, attempts=0)
    assert v.failing and v.delay == 0.0


def test_rotate_averages_start_positions_with_index_bound_waits() -> None:
    v = glibc((S, A, A), timeout=5, attempts=2, rotate=True)
    assert v.delays_by_start == (5.0, 0.0, 0.0)
    assert v.delay == pytest.approx(5 / 3)
    v = glibc((A, S), timeout=4, attempts=2, rotate=True)
    assert v.delays_by_start == (0.0, 4.0)
    assert v.delay == 2.0


def test_use_vc_one_pass_and_kernel_connect_timeout() -> None:
    assert tcp_connect_timeout(6) == 127.0
    v = glibc((S, A), timeout=5, attempts=3, use_vc=True)
    assert v.delay == 127.0
    v = glibc((S, S), timeout=5, attempts=3, use_vc=True, connect_timeout=3.0)
    assert v.failing and v.delay == 6.0


def test_musl_parallel_first_answer_wins() -> None:
    v = musl((S, S, A), timeout=5, attempts=2)
    assert (v.delay, v.failing) == (0.0, False)
    v = musl((S, R, F), timeout=5, attempts=2)
    assert (v.delay, v.failing) == (5.0, True)
    assert musl((S,), timeout=90, attempts=2).delay == 60.0
    assert musl((A,), timeout=0, attempts=2).failing


def test_model_reads_the_parsed_file() -> None:
    rc = parse_resolv_conf(
        "nameserver 192.0.2.1\nnameserver 192.0.2.2\noptions timeout:2 attempts:1\n"
    )
    assert model(rc, (S, A), "glibc").delay == 2.0
    assert model(rc, (S, A), "musl").delay == 0.0
    assert model(rc, (S, S), "musl").delay == 2.0
    with pytest.raises(ValueError, match="unknown libc"):
        model(rc, (S, A), "uclibc")


# (libc, backends, dead, timeout, attempts, failing share, pinned cost, unpinned share)
VIP_CASES = [
    # two CoreDNS pods, one silent: half the lookups fail after 2 x 5 s
    ("glibc", 2, 1, 5, 2, 0.5, 10.0, 0.25),
    ("glibc", 4, 1, 1, 2, 0.25, 2.0, 0.0625),
    ("glibc", 3, 0, 5, 2, 0.0, 10.0, 0.0),
    ("glibc", 1, 1, 2, 3, 1.0, 6.0, 1.0),
    # musl's timeout is the whole transaction; attempts only divide it
    ("musl", 2, 1, 5, 2, 0.5, 5.0, 0.25),
]


@pytest.mark.parametrize("case", VIP_CASES)
def test_single_vip_conntrack_pins_every_retry(
    case: tuple[str, int, int, int, int, float, float, float],
) -> None:
    libc, backends, dead, timeout, attempts, failing, cost, unpinned = case
    v = vip_pinned(backends=backends, dead=dead, timeout=timeout, attempts=attempts, libc=libc)
    assert (v.failing_share, v.pinned_cost, v.unpinned_failing_share) == (failing, cost, unpinned)
    assert v.expected_delay == pytest.approx(failing * cost)


def test_single_vip_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="3 dead of 2"):
        vip_pinned(backends=2, dead=3, timeout=5, attempts=2)


def test_failover_report_names_the_pinning_of_a_single_nameserver() -> None:
    conf = parse_resolv_conf("nameserver 10.96.0.10\noptions ndots:5 timeout:1 attempts:2\n")
    outcomes = (ServerOutcome(ServerState.ANSWERING),)
    rep = FileReport(
        ResolvConfWatch(path="/etc/resolv.conf"),
        conf,
        servers=conf.servers,
        outcomes=outcomes,
        details=("",),
        verdicts=(model(conf, outcomes, "glibc"),),
    )
    text = render_report(rep, "glibc")
    assert "conntrack pins them all to one backend" in text
    assert "50% of the names a lookup tries fail, after 2 s each (not 25%)" in text
    two = parse_resolv_conf("nameserver 10.96.0.10\nnameserver 10.96.0.11\n")
    rep2 = FileReport(
        ResolvConfWatch(path="/etc/resolv.conf"),
        two,
        servers=two.servers,
        outcomes=outcomes * 2,
        details=("", ""),
        verdicts=(model(two, outcomes * 2, "glibc"),),
    )
    assert "conntrack" not in render_report(rep2, "glibc")
