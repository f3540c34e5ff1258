"""The pod-view walk (dnsfleet.podview.walk): the names each libc tries and where it
stops, as tables. The real glibc and musl check the same rows in test_podview_oracle.py."""

from __future__ import annotations

import pytest

from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.podview.walk import (
    Libc,
    Next,
    Outcome,
    Reply,
    Role,
    Step,
    next_index,
    steps,
    verdict,
    walk_outcome,
)

pytestmark = pytest.mark.unit

G, M = Libc.GLIBC, Libc.MUSL
POD = (
    "nameserver 10.96.0.10\nsearch demo.svc.cluster.local svc.cluster.local cluster.local\n"
    "options ndots:5\n"
)
NX, ND, ANS, SF, TO, REF = (
    Reply.NXDOMAIN,
    Reply.NODATA,
    Reply.ANSWER,
    Reply.SERVFAIL,
    Reply.TIMEOUT,
    Reply.CONN_REFUSED,
)


def names(text: str, name: str, libc: Libc) -> list[str]:
    return [s.qname for s in steps(parse_resolv_conf(text), name, libc)]


EXPANDED = [
    "x.example.test.demo.svc.cluster.local.",
    "x.example.test.svc.cluster.local.",
    "x.example.test.cluster.local.",
]

# (resolv.conf, name, libc, the names in order)
ORDER = [
    (POD, "x.example.test", G, [*EXPANDED, "x.example.test."]),
    (POD, "x.example.test", M, [*EXPANDED, "x.example.test."]),
    (POD, "x.example.test.", G, ["x.example.test."]),
    (POD, "x.example.test.", M, ["x.example.test."]),
    ("search a b\noptions ndots:1\n", "x.y", G, ["x.y.", "x.y.a.", "x.y.b."]),
    ("search a b\noptions ndots:1\n", "x.y", M, ["x.y."]),
    ("search a b\n", "x", G, ["x.a.", "x.b.", "x."]),
    ("search a b\noptions no-tld-query\n", "x", G, ["x.a.", "x.b."]),
    ("search a .\n", "x", G, ["x.a.", "x."]),
    ("", "x", G, ["x."]),
    ("", "x", M, ["x."]),
]


@pytest.mark.parametrize(("text", "name", "libc", "want"), ORDER)
def test_the_names_tried_in_order(text: str, name: str, libc: Libc, want: list[str]) -> None:
    assert names(text, name, libc) == want


def run(
    text: str, name: str, libc: Libc, answers: dict[str, tuple[Reply, ...]]
) -> tuple[list[str], Outcome]:
    """The walk driven by a table of replies per name (NXDOMAIN for the others)."""
    plan = steps(parse_resolv_conf(text), name, libc)
    tried: list[str] = []
    decided: list[tuple[Step, object]] = []
    at: int | None = 0
    while at is not None and len(tried) <= len(plan):
        step = plan[at]
        tried.append(step.qname)
        v = verdict(libc, step, answers.get(step.qname, (NX, NX)))
        decided.append((step, v))
        at = next_index(plan, at, v)
    return tried, walk_outcome(libc, tuple(decided))  # type: ignore[arg-type]


# (name, libc, replies by name, names tried, outcome)
WALKS = [
    # A cluster service: the second search domain answers A, NODATA AAAA ends nothing.
    ("api.demo", G, {"api.demo.svc.cluster.local.": (ANS, ND)}, 2, Outcome.ANSWER),
    ("api.demo", M, {"api.demo.svc.cluster.local.": (ANS, ND)}, 2, Outcome.ANSWER),
    # NODATA on a search domain: glibc walks on, musl stops (EAI_NODATA).
    ("txtonly", G, {"txtonly.demo.svc.cluster.local.": (ND, ND)}, 4, Outcome.NODATA),
    ("txtonly", M, {"txtonly.demo.svc.cluster.local.": (ND, ND)}, 1, Outcome.NODATA),
    # A timeout: glibc leaves the search list but still tries the name as is; musl stops.
    (
        "x.example.test",
        G,
        {n: (TO, TO) for n in [*EXPANDED, "x.example.test."]},
        2,
        Outcome.TIMEOUT,
    ),
    ("x.example.test", M, {n: (TO, TO) for n in EXPANDED}, 1, Outcome.TIMEOUT),
    # SERVFAIL: glibc goes on to the next domain; musl stops.
    (
        "x.example.test",
        G,
        {EXPANDED[0]: (SF, SF), "x.example.test.": (ANS, ANS)},
        4,
        Outcome.ANSWER,
    ),
    ("x.example.test", M, {EXPANDED[0]: (SF, SF)}, 1, Outcome.SERVFAIL),
    # Every server refusing (ICMP): glibc gives up at once.
    ("x.example.test", G, {EXPANDED[0]: (REF, REF)}, 1, Outcome.REFUSED),
    # NXDOMAIN on A beside an AAAA answer: glibc answers, musl walks on (NXDOMAIN first).
    ("x.example.test", G, {EXPANDED[0]: (NX, ANS)}, 1, Outcome.ANSWER),
    (
        "x.example.test",
        M,
        {EXPANDED[0]: (NX, ANS), "x.example.test.": (ANS, ANS)},
        4,
        Outcome.ANSWER,
    ),
]


@pytest.mark.parametrize(("name", "libc", "answers", "tried", "outcome"), WALKS)
def test_where_the_walk_stops(
    name: str, libc: Libc, answers: dict[str, tuple[Reply, ...]], tried: int, outcome: Outcome
) -> None:
    got, got_outcome = run(POD, name, libc, answers)
    assert (len(got), got_outcome) == (tried, outcome), got


def test_glibc_as_is_first_then_the_search_list_keeps_its_failure() -> None:
    text = "search a\noptions ndots:1\n"
    got, outcome = run(text, "x.y", G, {"x.y.": (TO, TO), "x.y.a.": (NX, NX)})
    assert got == ["x.y.", "x.y.a."]
    # res_query.c: the name tried first as is gives the lookup its error
    assert outcome is Outcome.TIMEOUT


def test_roles() -> None:
    plan = steps(parse_resolv_conf(POD), "x.example.test", G)
    assert [s.role for s in plan] == [Role.SEARCH] * 3 + [Role.LAST]
    assert [s.suffix for s in plan] == [
        "demo.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
        "",
    ]
    assert verdict(G, plan[0], (TO, TO)).next is Next.AS_IS
