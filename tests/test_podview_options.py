"""The resolv.conf options of a pod, against the real libcs in a pod namespace
(tests/harness/podlab.py: CoreDNS behind service VIPs, ndots:5 and the three search domains
Kubernetes writes): ``single-request``, ``single-request-reopen``, ``use-vc``, TCP after a
truncated reply, ``rotate``, two nameservers with the first silent, SERVFAIL from the
first. For each, dnsfleet's walk sends exactly the queries glibc's ``getent ahosts`` sent
(and musl's getaddrinfo where musl reads the case the same way every time) and ends the
same way; where a timeout makes the wait, within 10 % of it.

Left out, and why:
- ``rotate``: glibc starts each transaction at a random server, so which one answered and
  (with a silent one) the wait are draws; with both answering the count is not, and only
  the count is compared.
- musl with a SERVFAIL first server: res_msend asks a server that said SERVFAIL again at
  once, while the retry budget lasts and the other server's answer is on its way, so the
  count depends on which reply arrives first (21 to 28 for one lookup here).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.podlab import (
    BIG,
    CLUSTER_DNS,
    LIVE,
    SEARCH,
    SERVFAIL_DNS,
    SILENT_VIP,
    PodLab,
    podlab,
)
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

_SEARCH = f"search {SEARCH}\n"
_ONE = f"nameserver {CLUSTER_DNS}\n{_SEARCH}"
EXTERNAL, LOCAL = "www.example.test", "api.demo"

# (scenario, resolv.conf, name, glibc: queries, outcome; musl: queries, outcome (None: not
#  compared); the server that answers (None: not compared); glibc's wait in seconds, where
#  a timeout makes it)
CASES: list[tuple[str, str, str, int, str, int | None, str, str | None, float | None]] = [
    (
        "single-request",
        f"{_ONE}options ndots:5 single-request\n",
        EXTERNAL, 8, "answer", 8, "answer", CLUSTER_DNS, None,
    ),
    (
        "single-request-reopen",
        f"{_ONE}options ndots:5 single-request-reopen\n",
        EXTERNAL, 8, "answer", 8, "answer", CLUSTER_DNS, None,
    ),
    # musl has no use-vc: its 8 are datagrams.
    (
        "use-vc",
        f"{_ONE}options ndots:5 use-vc\n",
        EXTERNAL, 8, "answer", 8, "answer", CLUSTER_DNS, None,
    ),
    # The A and AAAA replies come back truncated (a CNAME chain too long for 512 octets):
    # glibc asks both again over TCP; musl 1.2.3 has no TCP and takes the truncated reply,
    # a CNAME without an address, which ends its walk.
    (
        "TCP after TC",
        f"{_ONE}options ndots:5\n",
        BIG.split(".")[0], 4, "answer", 2, "nodata", CLUSTER_DNS, None,
    ),
    (
        "rotate",
        f"{_ONE}nameserver {LIVE}\noptions ndots:5 rotate\n",
        EXTERNAL, 8, "answer", 16, "answer", None, None,
    ),
    # glibc waits timeout:1 on the silent server for each of the two names it tries; musl
    # asks both servers at once and waits for nothing.
    (
        "two nameservers, the first silent",
        f"nameserver {SILENT_VIP}\n{_ONE}options ndots:5 timeout:1 attempts:2\n",
        LOCAL, 8, "answer", 8, "answer", CLUSTER_DNS, 2.0,
    ),
    (
        "SERVFAIL from the first server",
        f"nameserver {SERVFAIL_DNS}\n{_ONE}options ndots:5\n",
        EXTERNAL, 16, "answer", None, "", CLUSTER_DNS, None,
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PodLab, dict[str, Path]]]:
    work = tmp_path_factory.mktemp("podlab-options")
    programs = {libc: build_gai(work, libc) for libc in ("glibc", "musl")}
    with podlab(work) as lab_:
        yield lab_, programs


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_option_sends_what_the_libc_sends(
    lab: tuple[PodLab, dict[str, Path]],
    case: tuple[str, str, str, int, str, int | None, str, str | None, float | None],
) -> None:
    scenario, conf, name, glibc_n, glibc_out, musl_n, musl_out, server, seconds = case
    podlab_, programs = lab
    pod = podlab_.add_pod(conf)
    g = getent(podlab_, pod, name)
    assert g.queries == glibc_n, f"{scenario}: glibc sent {g.queries}\n{g.text}"
    assert ("STREAM" in g.text) == (glibc_out == "answer"), g.text
    glibc_wall = None
    if seconds is not None:
        # The same getaddrinfo call as getent's, timed inside the process.
        t = gai(podlab_, pod, programs["glibc"], name)
        assert t.queries == glibc_n, t
        glibc_wall = least(
            t.gai()[1],
            lambda: gai(podlab_, pod, programs["glibc"], name).gai()[1],
            near=seconds,
        )
        assert glibc_wall == pytest.approx(seconds, rel=LATENCY_TOLERANCE), t
    oracles: dict[str, tuple[int, str, float | None]] = {"glibc": (glibc_n, glibc_out, glibc_wall)}
    if musl_n is not None:
        m = gai(podlab_, pod, programs["musl"], name)
        rc, _ = m.gai()
        assert m.queries == musl_n, f"{scenario}: musl sent {m.queries}\n{m.text}"
        assert (rc == 0) == (musl_out == "answer"), m.text
        oracles["musl"] = (musl_n, musl_out, None)
    for libc, (n, outcome, wall) in oracles.items():
        d = dnsfleet(podlab_, pod, name, libc)
        got = d.driver()
        assert (d.queries, got["queries"]) == (n, n), f"{scenario} {libc}: {got}, seen {d.queries}"
        assert got["outcome"] == outcome, (libc, got)
        if server is not None:
            assert got["nameserver"] == (server if outcome == "answer" else ""), (libc, got)
        if wall is not None:
            took = least(
                got["duration"],
                functools.partial(walk_wait, podlab_, pod, name, libc),
                near=wall,
            )
            assert took == pytest.approx(wall, rel=LATENCY_TOLERANCE), (libc, got, g)
