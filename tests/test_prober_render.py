"""The per-target families of /metrics are rendered from templates compiled into f-string
functions (prober.py): held here, byte for byte, to a plain line-by-line
renderer, for labels that need escaping, every reason and random counters; and the
latency bucket an answer lands in, at and around every bound."""

from __future__ import annotations

import random
from itertools import accumulate

import pytest

from dnsfleet.config import parse
from dnsfleet.dnswire import Response
from dnsfleet.exposition import format_value, le_text, render
from dnsfleet.prober import Prober, TargetState
from dnsfleet.proberecord import LATENCY_BUCKETS
from dnsfleet.probes import REASONS, ProbeResult, Reason
from dnsfleet.probes.result import Exchange, judge

pytestmark = pytest.mark.unit

LE = [*(le_text(b) for b in LATENCY_BUCKETS), "+Inf"]


def reference(states: list[TargetState]) -> str:
    """What the exposition must say, one f-string per line (the plain, slow renderer): a
    failure gauge only for the failing reason, a failures counter only for the reasons the
    target has failed with, at 0 for those first failed since the last record."""
    gauges: dict[str, list[str]] = {k: [] for k in ("success", "duration", "fail", "rcode", "rrs")}
    failures: list[str] = []
    attempts: list[str] = []
    hist: list[str] = []
    for st in states:
        lab = st.labels.text
        r = st.last
        if r is not None:
            gauges["success"].append(f"dnsfleet_probe_success{{{lab}}} {1 if r.success else 0}\n")
            gauges["duration"].append(
                f"dnsfleet_probe_duration_seconds{{{lab}}} {format_value(r.duration)}\n"
            )
            gauges["rcode"].append(f"dnsfleet_probe_dns_rcode{{{lab}}} {r.rcode}\n")
            gauges["rrs"].append(f"dnsfleet_probe_answer_rrs{{{lab}}} {r.answer_rrs}\n")
            if r.reason is not None:
                gauges["fail"].append(
                    f'dnsfleet_probe_failure{{{lab},reason="{r.reason.value}"}} 1\n'
                )
        failures.extend(
            f'dnsfleet_probe_failures_total{{{lab},reason="{REASONS[i].value}"}} '
            f"{0 if i in st.failures.newborn else n}\n"
            for i, n in st.failures.counts.items()
        )
        attempts.append(f"dnsfleet_probe_attempts_total{{{lab}}} {st.probes}\n")
        acc = list(accumulate(st.buckets))
        hist.extend(
            f'dnsfleet_probe_latency_seconds_bucket{{{lab},le="{le}"}} {a}\n'
            for le, a in zip(LE, acc, strict=True)
        )
        hist.append(f"dnsfleet_probe_latency_seconds_sum{{{lab}}} {format_value(st.latency_sum)}\n")
        hist.append(f"dnsfleet_probe_latency_seconds_count{{{lab}}} {acc[-1]}\n")

    def fam(name: str, help_: str, kind: str, lines: list[str]) -> str:
        return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n" + "".join(lines) if lines else ""

    return "".join(
        [
            fam(
                "dnsfleet_probe_success",
                "1 if the last probe succeeded.",
                "gauge",
                gauges["success"],
            ),
            fam(
                "dnsfleet_probe_duration_seconds",
                "Duration of the last probe, answer or not.",
                "gauge",
                gauges["duration"],
            ),
            fam(
                "dnsfleet_probe_failure",
                "1 for the reason the last probe failed; absent while it succeeded (no series "
                "for the other reasons).",
                "gauge",
                gauges["fail"],
            ),
            fam(
                "dnsfleet_probe_dns_rcode",
                "Response code of the last answer (numeric), -1 when there was none.",
                "gauge",
                gauges["rcode"],
            ),
            fam(
                "dnsfleet_probe_answer_rrs",
                "Resource records in the answer section of the last answer.",
                "gauge",
                gauges["rrs"],
            ),
            fam(
                "dnsfleet_probe_failures_total",
                "Failed probes per target by reason since the exporter started; a reason's "
                "series appears at 0 in the scrape of its first failure, then counts.",
                "counter",
                failures,
            ),
            fam(
                "dnsfleet_probe_attempts_total",
                "Probes sent to this target on /metrics since the exporter started, answered "
                "or not.",
                "counter",
                attempts,
            ),
            fam(
                "dnsfleet_probe_latency_seconds",
                "Latency of probes that got an answer (any rcode).",
                "histogram",
                hist,
            ),
        ]
    )


def test_families_render_as_line_by_line() -> None:
    rng = random.Random(21)
    targets = [
        {
            "address": f"127.0.{i // 250}.{i % 250 + 1}",
            "module": "m",
            "labels": {"site": f"s{i % 3}", "note": 'a "quoted"\\back\\slash'},
        }
        for i in range(120)
    ]
    cfg = parse({"modules": {"m": {}}, "targets": targets, "resolv_conf": []}, source="x.yml")
    prober = Prober()
    prober.configure(cfg)
    states = list(prober.states.values())
    for st in states:
        failed = rng.sample(range(len(REASONS)), rng.choice([0, 0, 1, 2, len(REASONS)]))
        st.failures.counts = {i: rng.randint(1, 9) for i in failed}
        st.failures.newborn = frozenset(i for i in failed if rng.random() < 0.3)
        st.buckets = [rng.randint(0, 9) for _ in st.buckets]
        st.latency_sum = rng.random() * 5
        st.probes = rng.randint(0, 10**6)
        reason = rng.choice([None, *REASONS])
        st.last = (
            None
            if rng.random() < 0.1
            else ProbeResult(
                success=reason is None,
                reason=reason,
                duration=rng.choice([0.0, 1e-7, rng.random()]),
                rcode=rng.choice([-1, 0, 2, 3]),
                answer_rrs=rng.randint(0, 9),
                detail="",
            )
        )
    want = reference(states)
    text = render([f for f in prober.families() if f.name.startswith("dnsfleet_probe_")])
    assert text == want


@pytest.mark.parametrize(
    "duration",
    [0.0, *LATENCY_BUCKETS, *(b * 1.0001 for b in LATENCY_BUCKETS), 1e9],
)
def test_an_answer_lands_in_the_first_bucket_at_or_above_it(duration: float) -> None:
    cfg = parse(
        {"modules": {"m": {}}, "targets": [{"address": "127.0.0.1", "module": "m"}]},
        source="x.yml",
    )
    prober = Prober()
    prober.configure(cfg)
    (st,) = prober.states.values()
    answer = Exchange(response=None, error=Reason.TIMEOUT, duration=duration)
    st.observe(judge(answer, cfg.modules["m"]), 0.0)
    assert sum(st.buckets) == 0  # a timeout's duration is no latency

    resp = Response(
        id=1,
        flags=0x8180,
        rcode=0,
        answer_rrs=1,
        matching_answers=1,
        min_ttl=60,
        nsid=None,
        wire=b"",
    )
    st.observe(judge(Exchange(response=resp, error=None, duration=duration), cfg.modules["m"]), 0.0)
    want = next((i for i, b in enumerate(LATENCY_BUCKETS) if duration <= b), len(LATENCY_BUCKETS))
    assert st.buckets[want] == 1 and sum(st.buckets) == 1


def test_expect_bogus_probes_are_counted_from_zero_and_follow_the_module() -> None:
    """dnsfleet_probe_bogus_queries_total: the probes of `dnssec: expect_bogus` modules,
    which a validating resolver answers SERVFAIL on purpose (the SLO rules subtract them);
    present at 0 before the first probe, so a rate never misses the first one; absent for
    every other module; a reload that turns the check on keeps the attempts."""

    def config(dnssec: str) -> dict[str, object]:
        return {
            "modules": {"m": {}, "bogus": {"query_name": "bogus.test", "dnssec": dnssec}},
            "targets": [
                {"address": "127.0.0.1", "module": "m"},
                {"address": "127.0.0.1", "module": "bogus"},
            ],
        }

    def bogus_lines(prober: Prober) -> list[str]:
        text = render([f for f in prober.families() if f.name.startswith("dnsfleet_probe_")])
        return [ln for ln in text.splitlines() if ln.startswith("dnsfleet_probe_bogus_queries")]

    prober = Prober()
    prober.configure(parse(config("expect_bogus"), source="x.yml"))
    assert bogus_lines(prober) == [
        'dnsfleet_probe_bogus_queries_total{target="127.0.0.1",module="bogus"} 0'
    ]
    prober.states[("127.0.0.1", "bogus")].sent = 7
    assert bogus_lines(prober)[0].endswith(" 7")
    prober.configure(parse(config("do"), source="x.yml"))
    assert bogus_lines(prober) == []
    assert prober.states[("127.0.0.1", "bogus")].sent == 7
    prober.configure(parse(config("expect_bogus"), source="x.yml"))
    assert bogus_lines(prober)[0].endswith(" 7")


@pytest.mark.parametrize(
    ("result", "budget", "lead", "want"),
    [
        # The module's whole 2 s timeout: evidence, whoever asked.
        (("timeout", 2.0), 9.5, True, True),
        (("timeout", 2.0), 9.5, False, True),
        # A shorter requester's deadline ended the wait: its own view only.
        (("timeout", 0.05), 0.05, False, False),
        (("timeout", 0.5), 0.5, False, False),
        # The lead requester's cycle (the Prometheus server's): its timeouts count when it
        # gave the probe at least a second, or the whole module timeout if that is less;
        # a 10 s module under a 9.5 s scrape budget still counts.
        (("timeout", 1.5), 1.5, True, True),
        (("timeout", 0.5), 0.5, True, False),
        (("timeout", 9.5), 9.5, True, True),
        # Answers and refusals are evidence within any budget.
        (("refused", 0.01), 0.05, False, True),
        (("rcode", 0.01), 0.05, False, True),
        # dnsfleet's own exception and a probe that never started are not.
        (("internal", 0.01), 9.5, True, False),
        ("not started", 9.5, True, False),
    ],
)
def test_what_is_evidence_about_a_target(
    result: tuple[str, float] | str, budget: float, lead: bool, want: bool
) -> None:
    from dnsfleet.prober import _NOT_STARTED, evident
    from dnsfleet.probes.result import failed

    timeout = 10.0 if isinstance(result, tuple) and result[1] == 9.5 else 2.0
    cfg = parse(
        {"modules": {"m": {"timeout": f"{timeout}s"}},
         "targets": [{"address": "127.0.0.1", "module": "m"}]},
        source="x.yml",
    )  # fmt: skip
    r = _NOT_STARTED if isinstance(result, str) else failed(Reason(result[0]), result[1], "x")
    assert evident(r, cfg.modules["m"], budget=budget, lead=lead) is want


def test_a_probe_that_is_no_evidence_is_still_sent() -> None:
    """A query cut short by its requester went out (a validating resolver still answers an
    expect_bogus one with SERVFAIL, so it counts there); the attempts and failures
    counters leave it out; a probe that could not start is neither."""
    from dnsfleet.prober import _NOT_STARTED
    from dnsfleet.probes.result import failed

    cfg = parse(
        {
            "modules": {"bogus": {"query_name": "bogus.test", "dnssec": "expect_bogus",
                                  "timeout": "2s"}},
            "targets": [{"address": "127.0.0.1", "module": "bogus"}],
        },
        source="x.yml",
    )  # fmt: skip
    prober = Prober()
    prober.configure(cfg)
    st = prober.states[("127.0.0.1", "bogus")]
    rows = [
        (failed(Reason.TIMEOUT, 2.0, "module timeout"), True, (1, 1, 1)),
        (failed(Reason.TIMEOUT, 0.05, "scrape deadline"), False, (2, 1, 1)),
        (_NOT_STARTED, False, (2, 1, 1)),
        (failed(Reason.REFUSED, 0.01, "refused"), True, (3, 2, 2)),
    ]
    for result, counted, (sent, probes, failures) in rows:
        st.observe(result, 0.0, counted=counted)
        got = (st.sent, st.probes, sum(st.failures.counts.values()))
        assert got == (sent, probes, failures), result
