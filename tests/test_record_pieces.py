"""The per-target families' text goes out in pieces of a few dozen targets, never joined
whole (a large family whole was an mmap faulted in anew at every scrape): what a scrape
sends piece by piece (text_parts, gzip_parts) is the text render writes whole."""

from __future__ import annotations

import random
import zlib

import pytest

from dnsfleet.config import parse
from dnsfleet.exposition import TextFamily, gzip_parts, render, render_bytes, text_parts
from dnsfleet.prober import Prober
from dnsfleet.probes import REASONS, ProbeResult

pytestmark = pytest.mark.unit


def fleet(n: int) -> Prober:
    rng = random.Random(5)
    targets = [
        {"address": f"127.0.{i // 250}.{i % 250 + 1}", "module": "m", "labels": {"n": str(i)}}
        for i in range(n)
    ]
    cfg = parse({"modules": {"m": {}}, "targets": targets, "resolv_conf": []}, source="x.yml")
    prober = Prober()
    prober.configure(cfg)
    for st in prober.states.values():
        st.buckets = [rng.randint(0, 9) for _ in st.buckets]
        st.latency_sum = rng.random()
        st.probes = rng.randint(1, 99)
        if rng.random() < 0.3:
            st.failures.add(rng.choice(REASONS))
        st.last = ProbeResult(
            success=True, reason=None, duration=rng.random(), rcode=0, answer_rrs=1, detail=""
        )
    return prober


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100])
def test_the_pieces_say_what_the_whole_says(n: int) -> None:
    fams = fleet(n).families()
    whole = render(fams)
    assert "".join(text_parts(fams)) == whole
    assert zlib.decompress(gzip_parts(text_parts(fams)), 31) == render_bytes(fams)
    for fam in fams:
        if isinstance(fam, TextFamily):
            parts = fam.parts()
            assert "".join(parts) == fam.lines
            assert all(parts) or parts == [""]


def test_the_largest_families_go_in_pieces() -> None:
    fams = {f.name: f for f in fleet(100).families() if isinstance(f, TextFamily)}
    # lines per target: 11 buckets, _sum and _count; one attempts counter
    for name, lines in (
        ("dnsfleet_probe_latency_seconds", 13),
        ("dnsfleet_probe_attempts_total", 1),
    ):
        parts = fams[name].parts()
        assert [p.count("\n") for p in parts] == [32 * lines] * 3 + [4 * lines], name


def test_a_family_of_pieces_is_its_pieces_joined() -> None:
    fam = TextFamily("dnsfleet_x", "X.", "gauge", lambda: ["dnsfleet_x 1\n", "dnsfleet_x 2\n"])
    assert fam.lines == "dnsfleet_x 1\ndnsfleet_x 2\n"
    assert list(text_parts([fam])) == [
        "# HELP dnsfleet_x X.\n# TYPE dnsfleet_x gauge\n",
        "dnsfleet_x 1\n",
        "dnsfleet_x 2\n",
    ]
    assert list(text_parts([TextFamily("dnsfleet_y", "Y.", "gauge", lambda: [])])) == []
    assert list(text_parts([TextFamily("dnsfleet_y", "Y.", "gauge", "")])) == []
