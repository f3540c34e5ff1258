"""The query files of ``dnsfleet capacity-test``: a ``--query`` or ``--miss-zone`` argument
checked, the unique names of a cache-miss ramp, and a query file written atomically with
its count and digest (recorded beside the figure, so a later run can say it used the same
queries)."""

from __future__ import annotations

import argparse
import hashlib
import math
from collections.abc import Iterator

import dns.exception
import dns.name
import dns.rdatatype

from dnsfleet.capacity.model import atomic_file

# More unique names than this would make a query file of gigabytes: ask for a shorter ramp.
MAX_MISS_NAMES = 20_000_000


def query_line(text: str) -> str:
    """``NAME[/TYPE]`` on the command line -> a resperf query line."""
    name, _, qtype = text.partition("/")
    qtype = (qtype or "A").upper()
    try:
        dns.rdatatype.from_text(qtype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise argparse.ArgumentTypeError(f"unknown query type in {text!r}") from None
    if not name or any(c.isspace() for c in name):
        raise argparse.ArgumentTypeError(f"invalid query {text!r}: want NAME[/TYPE]")
    return f"{name} {qtype}"


def zone_arg(text: str) -> str:
    """``--miss-zone``: a DNS name, not the root."""
    try:
        zone = dns.name.from_text(text).to_text()
    except dns.exception.DNSException as e:
        raise argparse.ArgumentTypeError(f"invalid zone {text!r}: {e}") from None
    if zone == ".":
        raise argparse.ArgumentTypeError("--miss-zone: the root is not a test zone")
    return zone


def miss_name_count(max_qps: int, ramp: int) -> int:
    """Names for a whole ramp without repeating one: a linear ramp from 0 to max_qps over
    ramp seconds sends max_qps * ramp / 2 queries; 5 % spare for resperf's rounding."""
    return math.ceil(max_qps * ramp / 2 * 1.05) + 100


def miss_names(zone: str, count: int, run: str) -> Iterator[str]:
    """Unique names under ``zone``: the run id makes them new to the resolver even after
    earlier runs (which cached their own names)."""
    for i in range(count):
        yield f"q{i}-{run}.{zone}"


def write_query_file(path: str, lines: Iterator[str] | list[str]) -> tuple[int, str]:
    """Write lines atomically; return (count, sha256 of the file)."""
    digest = hashlib.sha256()
    count = 0
    with atomic_file(path, ".queries.") as fh:
        for line in lines:
            raw = (line + "\n").encode("ascii")
            digest.update(raw)
            fh.write(raw)
            count += 1
    return count, digest.hexdigest()
