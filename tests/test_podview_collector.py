"""The pod view's configuration and families (collectors/podview.py), on hand-made lookups.
The lookups themselves are checked against real glibc and musl in test_podview_oracle.py."""

from __future__ import annotations

from typing import Any

import pytest

from dnsfleet.collectors.podview import families
from dnsfleet.config import ConfigError, PodView, parse
from dnsfleet.podview.driver import Lookup
from dnsfleet.podview.walk import Libc, Outcome
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

POD = "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/5e1a/resolv.conf"


def test_pod_view_section() -> None:
    cfg = parse(
        {"pod_view": [{"resolv_conf": POD, "names": ["api.demo", "x.example."]}]}, source="t"
    )
    (view,) = cfg.pod_view
    assert (view.names, view.libc, view.budget) == (("api.demo", "x.example."), "glibc", 30.0)
    # pod_view alone is something to monitor
    assert parse({"pod_view": []}, source="t").pod_view == ()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([{"resolv_conf": POD, "names": []}], "pod_view[0].names: no name to look up"),
        ([{"resolv_conf": POD, "names": ["a"] * 11}], "pod_view[0].names: 11 names: at most 10"),
        ([{"resolv_conf": POD, "names": ["a"], "libc": "bionic"}], "pod_view[0].libc"),
        ([{"resolv_conf": "relative", "names": ["a"]}], "pod_view[0].resolv_conf"),
        ([{"resolv_conf": POD, "names": ["a"], "nmes": 1}], "pod_view[0].nmes"),
        (
            [{"resolv_conf": POD, "names": ["a"]}, {"resolv_conf": POD, "names": ["b"]}],
            "pod_view[1]: resolv.conf",
        ),
    ],
)
def test_pod_view_refusals(section: Any, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse({"pod_view": section}, source="t")
    assert message in str(exc.value)


def _lookup(name: str, outcome: Outcome, suffix: str | None, queries: int) -> Lookup:
    return Lookup(
        name=name,
        libc=Libc.GLIBC,
        outcome=outcome,
        duration=4.0 if outcome is Outcome.TIMEOUT else 0.01,
        queries=queries,
        suffix=suffix,
        nameserver="10.96.0.10" if suffix is not None else "",
        steps=(),
    )


def test_families() -> None:
    view = PodView(resolv_conf=POD, names=("api.demo", "www.example.test", "gone"))
    got = of(
        families(
            [
                (
                    view,
                    [
                        _lookup("api.demo", Outcome.ANSWER, "svc.cluster.local", 4),
                        _lookup("www.example.test", Outcome.ANSWER, "", 8),
                        _lookup("gone", Outcome.TIMEOUT, None, 8),
                    ],
                ),
                (PodView(resolv_conf="/gone", names=("x",)), None),
            ]
        )
    )
    base = {("resolv_conf", POD), ("libc", "glibc")}

    def v(fam: str, **labels: str) -> float | None:
        return got.get((fam, frozenset(base | set(labels.items()))))

    assert v("dnsfleet_podview_resolv_conf_readable") == 1
    assert (
        got[
            (
                "dnsfleet_podview_resolv_conf_readable",
                frozenset({("resolv_conf", "/gone"), ("libc", "glibc")}),
            )
        ]
        == 0
    )
    assert v("dnsfleet_podview_queries_per_lookup", name="www.example.test") == 8
    assert v("dnsfleet_podview_lookup_success", name="gone") == 0
    assert v("dnsfleet_podview_lookup_failure", name="gone", reason="timeout") == 1
    assert v("dnsfleet_podview_lookup_failure", name="api.demo", reason="timeout") == 0
    assert v("dnsfleet_podview_lookup_duration_seconds", name="gone") == 4.0
    assert (
        v(
            "dnsfleet_podview_answer_info",
            name="api.demo",
            suffix="svc.cluster.local",
            nameserver="10.96.0.10",
        )
        == 1
    )
    assert not [
        k for k in got if k[0] == "dnsfleet_podview_answer_info" and ("name", "gone") in k[1]
    ]
