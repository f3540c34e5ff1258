"""exposition.merge joins one family's samples from several producers and refuses a
conflict, as client_python's registry refuses a duplicated name."""

from __future__ import annotations

import pytest

from dnsfleet.exposition import Family, FamilyConflict, merge, render


@pytest.mark.unit
def test_merge_joins_samples_of_one_family() -> None:
    a = Family("dnsfleet_x", "X.").add(1, {"target": "a"})
    b = Family("dnsfleet_x", "X.").add(2, {"target": "b"})
    merged = merge([a, b, Family("dnsfleet_y", "Y.").add(3)])
    assert [f.name for f in merged] == ["dnsfleet_x", "dnsfleet_y"]
    assert render(merged[:1]).splitlines()[-2:] == [
        'dnsfleet_x{target="a"} 1',
        'dnsfleet_x{target="b"} 2',
    ]
    assert len(a.samples) == 1  # the inputs are left alone


@pytest.mark.unit
@pytest.mark.parametrize(
    "other",
    [
        Family("dnsfleet_x", "X.", "counter").add(2, {"target": "b"}),
        Family("dnsfleet_x", "Another help.").add(2, {"target": "b"}),
        Family("dnsfleet_x", "X.").add(2, {"target": "a"}),
    ],
    ids=["type", "help", "series"],
)
def test_merge_refuses_a_conflict(other: Family) -> None:
    with pytest.raises(FamilyConflict, match="dnsfleet_x"):
        merge([Family("dnsfleet_x", "X.").add(1, {"target": "a"}), other])
