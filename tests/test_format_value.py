"""A sample value's text: the fast way for a finite float with a fraction (the per-target
families' durations and sums) says what the general rule says, for every float and int."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsfleet.exposition import format_value
from tests.harness.tools import examples

pytestmark = pytest.mark.unit


def general(value: float) -> str:
    """The exposition's number form, written out: NaN and the infinities by name, an
    integral value below 1e15 as an integer, anything else as Python's shortest repr."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0012, "0.0012"),
        (0.0, "0"),
        (-0.0, "0"),
        (2.0, "2"),
        (-3.0, "-3"),
        (1e15, "1000000000000000.0"),
        (999999999999999.0, "999999999999999"),
        (1e16, "1e+16"),
        (1e20, "1e+20"),
        (1e-10, "1e-10"),
        (1.5e-10, "1.5e-10"),
        (5e-324, "5e-324"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
        (7, "7"),
        (10**15, "1000000000000000.0"),
        (True, "1"),
    ],
)
def test_a_value_s_text(value: float, text: str) -> None:
    assert format_value(value) == text == general(value)


@settings(max_examples=examples(5000))
@given(st.floats() | st.integers(min_value=-(10**17), max_value=10**17))
def test_every_value_as_the_general_rule_says(value: float) -> None:
    assert format_value(value) == general(value)


@settings(max_examples=examples(2000))
@given(st.integers(min_value=-(10**16), max_value=10**16))
def test_integral_floats_as_the_general_rule_says(n: int) -> None:
    assert format_value(float(n)) == general(float(n))
