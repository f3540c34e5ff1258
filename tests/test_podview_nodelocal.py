"""NodeLocal DNSCache down, as pods live it: the pod lab with node-cache on 169.254.20.10
in the node namespace (tests/harness/podnodelocal.py), and two pods as kubelet writes them
with NodeLocal: (a) the cache alone, (b) the cache then the cluster DNS VIP (the resolv.conf
fallback), both with ndots:5, the three search domains and ``timeout:1 attempts:2``.
node-cache serving, hung (SIGSTOP: its socket takes datagrams and never answers) and killed
with its interface left (the node refuses with ICMP port unreachable). glibc's ``getent
ahosts`` and the getaddrinfo program built against glibc and musl are the oracles: dnsfleet's
walk must count what they sent exactly, end as they did, and wait as long within 10 % where a
timeout makes the wait. The real exporter, run on the node with the pod view and the
nodelocal collector, must say what the pods lived, and the alerts must fire only for (a).
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.harness.metrics import Samples, samples
from tests.harness.podlab import CLUSTER_DNS, SEARCH
from tests.harness.podnodelocal import CACHE, NodeLocalLab, nodelocal_podlab
from tests.harness.podoracle import (
    LATENCY_TOLERANCE,
    build_gai,
    dnsfleet,
    gai,
    getent,
    least,
    walk_wait,
)
from tests.harness.tools import binary

pytestmark = [pytest.mark.integration, pytest.mark.netns]

OPTIONS = f"search {SEARCH}\noptions ndots:5 timeout:1 attempts:2\n"
RESOLV = {
    "a": f"nameserver {CACHE}\n{OPTIONS}",
    "b": f"nameserver {CACHE}\nnameserver {CLUSTER_DNS}\n{OPTIONS}",
}
# A cluster-local name: answered by its second search domain, four queries when the cache
# answers (no amplification ticket to tell apart from the NodeLocal alerts).
NAME = "api.demo"
ANY = "*"  # musl asks both nameservers of (b) at once: the first answer wins, either

# (state, pod, libc): queries sent, outcome, the wait where a timeout makes it, nameserver.
# Hung: glibc (a) waits 2 s on the first search domain, leaves the list and waits 2 s on the
# name as is; (b) waits 1 s on the cache for each of the two domains tried, then the VIP
# answers. musl asks every nameserver at once: (b) answered by the VIP at once, (a) given up
# after 1 s. Killed: glibc's connected socket hears the refusal and (a) stops at once (res_search
# tries no further name after ECONNREFUSED), (b) moves to the VIP at once; musl's unconnected
# socket hears nothing, so (a) is the hung case's 1 s.
CASES: dict[tuple[str, str, str], tuple[int, str, float | None, str]] = {
    ("up", "a", "glibc"): (4, "answer", None, CACHE),
    ("up", "a", "musl"): (4, "answer", None, CACHE),
    ("up", "b", "glibc"): (4, "answer", None, CACHE),
    ("up", "b", "musl"): (8, "answer", None, ANY),
    ("hung", "a", "glibc"): (8, "timeout", 4.0, ""),
    ("hung", "a", "musl"): (4, "timeout", 1.0, ""),
    ("hung", "b", "glibc"): (8, "answer", 2.0, CLUSTER_DNS),
    ("hung", "b", "musl"): (8, "answer", None, CLUSTER_DNS),
    ("killed", "a", "glibc"): (4, "refused", None, ""),
    ("killed", "a", "musl"): (4, "timeout", 1.0, ""),
    ("killed", "b", "glibc"): (8, "answer", None, CLUSTER_DNS),
    ("killed", "b", "musl"): (8, "answer", None, CLUSTER_DNS),
}
STATES = ("up", "hung", "killed")
Lab = tuple[NodeLocalLab, dict[str, str], dict[str, Path]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    work = tmp_path_factory.mktemp("podnodelocal")
    programs = {libc: build_gai(work, libc) for libc in ("glibc", "musl")}
    with nodelocal_podlab(work) as lab:
        pods = {pod: lab.add_pod(text) for pod, text in RESOLV.items()}
        yield lab, pods, programs


def _oracle(
    lab: NodeLocalLab, ns: str, program: Path, libc: str, wait: float | None
) -> tuple[int, bool, float]:
    """What the libc sent, whether it got an address, and the wait it measured itself (the
    least of up to three where a timeout makes it)."""
    run = gai(lab, ns, program, NAME)
    rc, took = run.gai()
    if libc == "glibc":
        g = getent(lab, ns, NAME)
        assert g.queries == run.queries, (g, run)
        assert ("10.96.0.20" in g.text) == (rc == 0), (g.text, run.text)
    if wait is not None:
        took = least(took, lambda: gai(lab, ns, program, NAME).gai()[1], near=wait)
    return run.queries, rc == 0, took


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("pod", ["a", "b"])
@pytest.mark.parametrize("libc", ["glibc", "musl"])
def test_pod_view_lives_what_the_pods_live(lab: Lab, state: str, pod: str, libc: str) -> None:
    podlab_, pods, programs = lab
    podlab_.node_cache(state)
    n, outcome, wait, nameserver = CASES[(state, pod, libc)]
    sent, answered, took = _oracle(podlab_, pods[pod], programs[libc], libc, wait)
    assert (sent, answered) == (n, outcome == "answer"), (state, pod, libc, sent, took)
    d = dnsfleet(podlab_, pods[pod], NAME, libc)
    got = d.driver()
    assert (got["queries"], got["outcome"]) == (n, outcome), got
    # The walk's own datagrams, as the lab counted them; after a refusal the next send on
    # the connected socket fails (the error is pending on it) where glibc's sendmmsg had
    # already sent both questions: the walk counts what glibc sent, not what it could.
    if (state, libc) == ("killed", "glibc"):
        assert d.queries <= n, (d.queries, got)
    else:
        assert d.queries == n, (d.queries, got)
    assert got["nameserver"] == nameserver or nameserver == ANY, got
    if wait is not None:
        assert took == pytest.approx(wait, rel=LATENCY_TOLERANCE), took
        walked = least(
            got["duration"],
            functools.partial(walk_wait, podlab_, pods[pod], NAME, libc),
            near=took,
        )
        assert walked == pytest.approx(took, rel=LATENCY_TOLERANCE), (got, took)


def _exporter_on_the_node(lab: NodeLocalLab, pod: str, work: Path) -> Samples:
    """The real exporter (--once) in the node namespace, as the node DaemonSet runs: the pod
    view of a copy of the pod's resolv.conf for both libcs, and the nodelocal collector
    told the pods' nameservers."""
    resolv = work / f"{pod}.resolv.conf"
    resolv.write_text(RESOLV[pod])
    nameservers = [CACHE] if pod == "a" else [CACHE, CLUSTER_DNS]
    cfg = {
        "pod_view": [
            {"resolv_conf": str(resolv), "names": [NAME], "libc": libc}
            for libc in ("glibc", "musl")
        ],
        "nodelocal": {
            "address": CACHE,
            "cluster_dns": CLUSTER_DNS,
            "pod_nameservers": nameservers,
        },
    }
    path = work / f"{pod}.yml"
    path.write_text(yaml.safe_dump(cfg))
    exe = str(Path(sys.executable).parent / "dnsfleet-exporter")
    out = subprocess.run(
        lab.node_exec(exe, "--config.file", str(path), "--once"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return samples(out.stdout)


def _path(got: Samples) -> str:
    (path,) = [
        dict(labels)["path"]
        for (name, labels), v in got.items()
        if name == "dnsfleet_nodelocal_pod_path" and v == 1
    ]
    return path


def _check_views(got: Samples, state: str, pod: str, resolv: str) -> None:
    """The exporter's figures are the pods' (CASES, which the oracles hold), and the
    nodelocal model names the path the pods' lookups took."""
    for fam in ("podview", "nodelocal"):
        assert got[("dnsfleet_collector_success", frozenset({("collector", fam)}))] == 1

    def v(fam: str, libc: str, **labels: str) -> float | None:
        key = {("resolv_conf", resolv), ("libc", libc), ("name", NAME), *labels.items()}
        return got.get((fam, frozenset(key)))

    answered_by = {}
    for libc in ("glibc", "musl"):
        n, outcome, _, _ = CASES[(state, pod, libc)]
        assert v("dnsfleet_podview_queries_per_lookup", libc) == n, (state, pod, libc)
        assert v("dnsfleet_podview_lookup_success", libc) == (outcome == "answer")
        if outcome != "answer":
            assert v("dnsfleet_podview_lookup_failure", libc, reason=outcome) == 1
        answered_by[libc] = {
            dict(labels)["nameserver"]
            for (name, labels), val in got.items()
            if name == "dnsfleet_podview_answer_info" and val == 1
            and dict(labels)["libc"] == libc and dict(labels)["resolv_conf"] == resolv
        }  # fmt: skip
    path = _path(got)
    assert (
        path
        == {"up": "nodelocal", "a": "none", "b": "resolv_conf_fallback"}[
            "up" if state == "up" else pod
        ]
    ), (state, pod, path)
    # The model against what the pods lived: no path where no libc got an answer; the
    # fallback where glibc (which asks in order) was answered by the VIP; the cache else.
    if path == "none":
        assert answered_by == {"glibc": set(), "musl": set()}, answered_by
    else:
        want = CACHE if path == "nodelocal" else CLUSTER_DNS
        assert answered_by["glibc"] == {want}, answered_by


def test_exporter_and_alerts_on_the_node(lab: Lab, tmp_path: Path) -> None:
    """The exporter on the node in each state; what it reported held for 10 minutes
    through the pod-view and NodeLocal rules (promtool): the pod-view page and the NodeLocal
    page fire for (a) while node-cache is hung or killed, the NodeLocal ticket alone for
    (b), nothing while it serves, and nothing yet at 1m; after an hour the amplification
    ticket for the answered lookups of 8 queries."""
    podlab_, _, _ = lab
    series = []
    expected: list[dict[str, object]] = []
    # An hour on: the answered lookups of 8 queries open the amplification ticket too (the
    # fallback's second nameserver; musl asks both at once even while the cache serves).
    amplified: list[dict[str, object]] = []
    for state in STATES:
        podlab_.node_cache(state)
        for pod in ("a", "b"):
            got = _exporter_on_the_node(podlab_, pod, tmp_path)
            resolv = str(tmp_path / f"{pod}.resolv.conf")
            _check_views(got, state, pod, resolv)
            target = {"instance": f"{state}-{pod}:9853", "job": "dnsfleet-node", "site": "lab"}
            for (name, labels), value in got.items():
                if name.startswith(("dnsfleet_podview_", "dnsfleet_nodelocal_")):
                    sel = {**dict(labels), **target}
                    text = ",".join(f'{k}="{x}"' for k, x in sorted(sel.items()))
                    series.append({"series": f"{name}{{{text}}}", "values": f"{value}x75"})
            for libc in ("glibc", "musl"):
                n, outcome, _, _ = CASES[(state, pod, libc)]
                if outcome == "answer" and n >= 8:
                    amplified.append(
                        _alert(
                            "DNSPodQueryAmplificationHigh",
                            "warning",
                            target,
                            resolv_conf=resolv,
                            libc=libc,
                        )
                    )
            if state == "up":
                continue
            if pod == "a":
                expected += [
                    _alert(
                        "DNSPodLookupsFailing", "critical", target, resolv_conf=resolv, libc=libc
                    )
                    for libc in ("glibc", "musl")
                ]
                expected.append(_alert("DNSNodeLocalPodsFailing", "critical", target, path="none"))
            else:
                expected.append(_alert("DNSNodeLocalDNSCacheDown", "warning", target))
    rules = Path(__file__).resolve().parent.parent / "alerts" / "rules"
    test = {
        "rule_files": [str(rules / "podview.rules.yml"), str(rules / "nodelocal.rules.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": 'ALERTS{alertstate="firing"}', "eval_time": "1m", "exp_samples": []},
                    {
                        "expr": 'ALERTS{alertstate="firing"}',
                        "eval_time": "10m",
                        "exp_samples": expected,
                    },
                    {
                        "expr": 'ALERTS{alertstate="firing"}',
                        "eval_time": "70m",
                        "exp_samples": expected + amplified,
                    },
                ],
            }
        ],
    }
    f = tmp_path / "podview-nodelocal.test.yml"
    f.write_text(yaml.safe_dump(test))
    out = subprocess.run(
        [binary("promtool"), "test", "rules", str(f)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _alert(alert: str, severity: str, target: dict[str, str], **labels: str) -> dict[str, object]:
    """An ALERTS sample; the pod-view alerts come from recording rules without ``job``."""
    if alert.startswith("DNSPod"):
        target = {k: x for k, x in target.items() if k != "job"}
    sel = {"alertname": alert, "alertstate": "firing", "severity": severity, **target, **labels}
    text = ",".join(f'{k}="{x}"' for k, x in sorted(sel.items()))
    return {"labels": f"ALERTS{{{text}}}", "value": 1}
