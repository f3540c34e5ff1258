"""dnstap insight, top-N: Space-Saving keeps the heavy hitters exact and its memory
bounded by its capacity whatever arrives."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnsfleet.dnstap.topn import SpaceSaving

ALPHABET = string.ascii_lowercase + string.digits


def _label(rnd: random.Random, n: int = 12) -> str:
    return "".join(rnd.choices(ALPHABET, k=n))


@pytest.mark.unit
def test_heavy_hitters_exact_among_150k_unique_names() -> None:
    rnd = random.Random(26)
    heavy = [f"heavy{i}.example" for i in range(5)]
    stream = [heavy[i % 5] if i % 4 == 0 else _label(rnd) + ".example" for i in range(200_000)]
    rnd.shuffle(stream)
    table = SpaceSaving(80)
    largest = 0
    for key in stream:
        table.add(key)
        largest = max(largest, len(table))
    assert largest < 2 * 80
    top = table.top(5)
    assert {key for key, _ in top} == set(heavy)
    # Counted from their first occurrence, before any compaction: exact.
    assert all(count == 10_000 for _, count in top)
    assert all(table.error(key) == 0 for key in heavy)
    assert table.total == 200_000
    assert table.floor < 10_000


@pytest.mark.unit
def test_top_orders_by_count_then_key_and_weights_add() -> None:
    table = SpaceSaving(10)
    for key, weight in [("b", 3), ("a", 3), ("c", 5), ("d", 1), ("a", 0 + 1)]:
        table.add(key, weight)
    assert table.top(10) == [("c", 5), ("a", 4), ("b", 3), ("d", 1)]
    assert table.top(2) == [("c", 5), ("a", 4)]
    assert table.top(0) == []
    assert table.top(-1) == []
    table.clear()
    assert table.top(5) == [] and len(table) == 0 and table.total == 0


@pytest.mark.unit
def test_refuses_nonsense_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SpaceSaving(0)
    with pytest.raises(ValueError, match="weight"):
        SpaceSaving(1).add("x", 0)


@pytest.mark.unit
def test_a_key_dropped_and_back_is_overestimated_never_under() -> None:
    table = SpaceSaving(2)
    for key in ["a", "a", "a", "b", "b", "c", "d"]:  # d triggers the compaction: c, d dropped
        table.add(key)
    assert "a" in table and "b" in table and "c" not in table
    assert table.floor == 1
    table.add("c")  # true count 2, re-enters at floor + 1
    assert table.count("c") == 2 and table.error("c") == 1 and table.guaranteed("c") == 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, 8),
    stream=st.lists(st.tuples(st.text(max_size=4), st.integers(1, 50)), max_size=300),
)
@pytest.mark.unit
def test_bounds_hold_for_any_stream(capacity: int, stream: list[tuple[str, int]]) -> None:
    table = SpaceSaving(capacity)
    true: dict[str, int] = {}
    for key, weight in stream:
        table.add(key, weight)
        true[key] = true.get(key, 0) + weight
        assert len(table) < 2 * capacity
    for key, count in true.items():
        if key in table:
            assert table.guaranteed(key) <= count <= table.count(key)
        else:
            assert count <= table.floor  # only a key no heavier than the floor is missing
    assert len(table.top(1_000)) < 2 * capacity
    assert table.total == sum(true.values())
