"""The per-CPU cpuidle counters as the cpu_latency collector reads them every scrape:
``disable``, ``time`` and ``usage`` of each state, converted in one pass, as strict as a
file-by-file check (the file to blame named), and the states of a CPU without a cpuidle
device."""

from __future__ import annotations

import pytest

from dnsfleet.parsers.cpuidle import parse_counters, parse_state_counters

pytestmark = pytest.mark.unit

FILES = ("state0/disable", "state0/time", "state0/usage")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ((b"0\n", b"123456789012\n", b"5\n"), [0, 123456789012, 5]),
        ((b"1\n", b"0\n", b"0\n"), [1, 0, 0]),
        ((b"0", b" 7 \n", b"18446744073709551615\n"), [0, 7, 18446744073709551615]),
    ],
)
def test_counters(raw: tuple[bytes, ...], expected: list[int]) -> None:
    assert parse_counters(raw, FILES, what="/sys/cpu0/cpuidle") == expected


@pytest.mark.parametrize(
    ("raw", "blamed", "got"),
    [
        ((b"0\n", b"-1\n", b"5\n"), "state0/time", "-1"),
        ((b"+1\n", b"2\n", b"5\n"), "state0/disable", "+1"),  # int() would take it
        ((b"0\n", b"1_000\n", b"5\n"), "state0/time", "1_000"),  # int() would take it
        ((b"0\n", b"2\n", b""), "state0/usage", ""),
        ((b"0\n", b"2\n", b"\n"), "state0/usage", ""),
        ((b"0\n", None, b"5\n"), "state0/time", ""),
        ((b"0\n", b"12 34\n", b"5\n"), "state0/time", "12 34"),
        ((b"0x1\n", b"2\n", b"5\n"), "state0/disable", "0x1"),
        ((b"0\n", b"2\n", "\u0665\n".encode()), "state0/usage", "\u0665"),
    ],
)
def test_garbage_names_its_file(raw: tuple[bytes | None, ...], blamed: str, got: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_counters(raw, FILES, what="/sys/cpu0/cpuidle")
    assert str(e.value) == (
        f"/sys/cpu0/cpuidle/{blamed}: expected a non-negative integer, got {got!r}"
    )


TWO = (*FILES, "state1/disable", "state1/time", "state1/usage")


def test_state_counters_by_column() -> None:
    raw = (b"0\n", b"10\n", b"1\n", b"1\n", b"20\n", b"2\n")
    assert parse_state_counters(raw, TWO, what="cpu0") == ((0, 1), (10, 20), (1, 2))


def test_a_cpu_without_cpuidle_device() -> None:
    assert parse_state_counters((None,) * 6, TWO, what="cpu0") is None
    # The states before the first whose files are all missing are the CPU's.
    raw = (b"0\n", b"10\n", b"1\n", None, None, None)
    assert parse_state_counters(raw, TWO, what="cpu0") == ((0,), (10,), (1,))


def test_one_file_missing_beside_the_others_is_an_error() -> None:
    raw = (b"0\n", b"10\n", b"1\n", b"0\n", None, b"2\n")
    with pytest.raises(ValueError, match=r"^cpu0/state1/time: expected a non-negative"):
        parse_state_counters(raw, TWO, what="cpu0")
