"""dnstap insight, random-subdomain detector: among 50,000 random names under 50,000
random parents it flags exactly the attacked parent; legitimate traffic is not flagged; an
attack that stops ages out; no input makes its state or its output exceed the bounds."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnsfleet.dnstap.subdomains import SATURATED, Detector, Suspect, estimate

ALPHABET = string.ascii_lowercase + string.digits


def _label(rnd: random.Random, n: int = 12) -> str:
    return "".join(rnd.choices(ALPHABET, k=n))


def _feed(detector: Detector, events: list[tuple[str, bool]], start: float, seconds: float) -> None:
    step = seconds / len(events)
    for i, (qname, nxdomain) in enumerate(events):
        detector.observe(qname, nxdomain, start + i * step)


def _mixed(rnd: random.Random, attacked: str | None) -> list[tuple[str, bool]]:
    """50,000 random names under 50,000 random parents (all NXDOMAIN: the hardest noise),
    20,000 random names under the attacked parent (all NXDOMAIN), a popular domain with a
    few names (NOERROR), a few names that do not exist asked over and over (NXDOMAIN), and
    a CDN with many names, one in ten of them missing (NXDOMAIN: tracked, but a 10 % share)."""
    events = [(f"{_label(rnd)}.{_label(rnd, 8)}.org", True) for _ in range(50_000)]
    if attacked:
        events += [(f"{_label(rnd)}.{attacked}", True) for _ in range(20_000)]
    events += [(f"{('www', 'mail', 'api')[i % 3]}.popular.com", False) for i in range(60_000)]
    events += [(f"host{i % 300}.typo.net", True) for i in range(30_000)]
    events += [
        (f"miss{i}.cdn.example.net", True) if i % 10 == 0 else (f"img{i}.cdn.example.net", False)
        for i in range(40_000)
    ]
    rnd.shuffle(events)
    return events


@pytest.mark.unit
def test_flags_exactly_the_attacked_parent_among_50k_random_parents() -> None:
    rnd = random.Random(26)
    detector = Detector(window=30.0, capacity=256, max_suspects=10)
    _feed(detector, _mixed(rnd, "victim.co.uk"), 1000.0, 50.0)
    ranked, tracked = detector.sizes()
    assert ranked < 2 * 2 * 256 and tracked <= 2 * 256
    suspects = detector.suspects(1050.0)
    assert [s.parent for s in suspects] == ["victim.co.uk"]
    victim = suspects[0]
    # 20,000 names in 4,096 bits leave ~31 zero bits: the estimate's error is skewed upward
    # (3.6 % standard error); these bounds are more than 4 standard deviations away.
    assert 20_000 * 0.85 < victim.distinct_children < 20_000 * 1.3
    assert victim.nxdomain_share == 1.0
    # 20,000 answers over the 50 s since the first window began, less those before tracking.
    assert 350 < victim.rate <= 400 and victim.responses <= 20_000


@pytest.mark.unit
def test_legitimate_traffic_alone_flags_nothing() -> None:
    detector = Detector()
    _feed(detector, _mixed(random.Random(27), None), 0.0, 50.0)
    assert detector.suspects(50.0) == []


@pytest.mark.unit
def test_an_attack_that_stops_ages_out_within_two_windows() -> None:
    rnd = random.Random(28)
    detector = Detector(window=30.0, min_distinct=500)
    attack = [(f"{_label(rnd)}.victim.example", True) for _ in range(5_000)]
    _feed(detector, attack, 0.0, 20.0)
    assert [s.parent for s in detector.suspects(20.0)] == ["victim.example"]
    quiet = [("www.victim.example", False)] * 1_000
    _feed(detector, quiet, 20.0, 40.0)  # the victim answers again, the flood has stopped
    assert [s.parent for s in detector.suspects(59.0)] == ["victim.example"]  # 0-30 s still in
    assert detector.suspects(60.0) == []  # windows 30-60 and 60-: no flood in them
    assert detector.suspects(1_000.0) == [] and detector.sizes() == (0, 0)


@pytest.mark.unit
def test_a_continuing_attack_stays_flagged_across_windows() -> None:
    rnd = random.Random(29)
    detector = Detector(window=10.0, min_distinct=500)
    for second in range(60):
        names = [(f"{_label(rnd)}.victim.example", True) for _ in range(100)]
        _feed(detector, names, float(second), 1.0)
        if second >= 6:  # 600 random names seen: above the threshold from then on
            assert [s.parent for s in detector.suspects(second + 1.0)] == ["victim.example"]


@pytest.mark.unit
def test_output_capped_at_max_suspects_most_distinct_first() -> None:
    rnd = random.Random(30)
    detector = Detector(max_suspects=3, min_distinct=100)
    events = [
        (f"{_label(rnd)}.victim{v}.example", True) for v in range(8) for _ in range(200 * (v + 1))
    ]
    rnd.shuffle(events)
    _feed(detector, events, 0.0, 10.0)
    suspects = detector.suspects(10.0)
    # 1,600, 1,400 and 1,200 names: apart by ten times the estimate's standard error.
    assert [s.parent for s in suspects] == ["victim7.example", "victim6.example", "victim5.example"]
    assert all(isinstance(s, Suspect) for s in suspects)


@pytest.mark.unit
def test_linear_counting_estimate() -> None:
    assert estimate(0) == 0.0
    assert estimate((1 << 4096) - 1) == SATURATED
    assert 4095 < SATURATED / 8.3 < 4105  # m ln m, m = 4096: about 34,000


@pytest.mark.unit
def test_refuses_nonsense_arguments() -> None:
    for kwargs in ({"window": 0.0}, {"capacity": 0}, {"min_nxdomain": 0}, {"max_suspects": -1}):
        with pytest.raises(ValueError):
            Detector(**kwargs)


NAMES = st.text(alphabet="ab.\\", max_size=12)
EVENT = st.tuples(NAMES, st.booleans(), st.floats(0.0, 5.0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, 6),
    max_suspects=st.integers(0, 4),
    events=st.lists(EVENT, max_size=400),
)
@pytest.mark.unit
def test_no_input_exceeds_the_bounds(
    capacity: int, max_suspects: int, events: list[tuple[str, bool, float]]
) -> None:
    detector = Detector(
        window=3.0, capacity=capacity, min_nxdomain=1, min_distinct=1, max_suspects=max_suspects
    )
    now = 0.0
    for qname, nxdomain, step in events:
        now += step
        detector.observe(qname, nxdomain, now)
        ranked, tracked = detector.sizes()
        assert ranked < 2 * 2 * capacity and tracked <= 2 * capacity
        suspects = detector.suspects(now)
        assert len(suspects) <= max_suspects
        assert len({s.parent for s in suspects}) == len(suspects)
        for s in suspects:
            assert 0.0 <= s.nxdomain_share <= 1.0 and 0 <= s.distinct_children <= SATURATED
            assert s.rate >= 0.0
