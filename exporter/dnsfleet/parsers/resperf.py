"""resperf (Debian dnsperf) output: the summary it prints and the plot file it writes.

resperf ramps the offered load from 0 to ``-m`` qps over ``-r`` seconds, counts queries and
responses in buckets of ``-i`` seconds (0.5 by default; a response counts in the bucket its
query was sent in), and reports as "Maximum throughput" the highest response rate of the
buckets before the first one whose loss exceeds ``-L`` percent (dnsperf ``src/resperf.c``,
``print_statistics``). The summary does not say whether such a bucket existed: a run whose
load never reached the loss limit prints a figure all the same, and that figure is the
ramp's (or the sending client's) limit, not the resolver's. Only the plot file tells.

resperf also counts every response as served, SERVFAIL included. A resolver out of
recursion slots answers SERVFAIL instead of dropping (BIND: "recursive-clients soft limit
exceeded, aborting oldest query"), so its "Maximum throughput" counts failures as capacity.
``capacity_from_plot`` applies resperf's rule to the answers that served the client
(NOERROR and NXDOMAIN, which resperf does not count as failures): a query lost or failed
is not served.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z ]+?):\s+([0-9.]+)", re.MULTILINE)
# resperf.c: printf("[Status] Fell behind by %d queries, ending test at %.0f qps\n", ...):
# the client could not send at the scheduled rate; what follows measures the client.
_FELL_BEHIND = re.compile(r"^\[Status\] Fell behind by (\d+) queries", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ResperfResult:
    max_qps: float  # "Maximum throughput"
    lost_percent: float  # "Lost at that point" (percent)
    queries_sent: int
    queries_completed: int
    fell_behind: bool  # resperf stopped early: it could not keep up with its schedule


@dataclass(frozen=True, slots=True)
class PlotPoint:
    """One bucket of the plot file (rates per second over the bucket)."""

    time: float
    target_qps: float
    sent_qps: float
    responses_qps: float
    failures_qps: float  # responses other than NOERROR and NXDOMAIN


def parse_resperf(text: str) -> ResperfResult:
    fields = {k.strip().lower(): v for k, v in _FIELD.findall(text)}
    try:
        return ResperfResult(
            max_qps=float(fields["maximum throughput"]),
            lost_percent=float(fields["lost at that point"]),
            queries_sent=int(float(fields["queries sent"])),
            queries_completed=int(float(fields["queries completed"])),
            fell_behind=_FELL_BEHIND.search(text) is not None,
        )
    except KeyError as e:
        raise ValueError(f"resperf output lacks {e.args[0]!r}: {text[-300:]!r}") from None


def parse_plot(text: str) -> tuple[PlotPoint, ...]:
    """The plot file: a '#' header, then 'time target_qps actual_qps responses_per_sec
    failures_per_sec avg_latency connections conn_avg_latency' per bucket (dnsperf
    ``src/resperf.c``)."""
    points = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split()
        if len(cols) < 5:
            raise ValueError(f"plot line {n}: want at least 5 columns, got {len(cols)}")
        try:
            t, target, sent, responses, failures = (float(c) for c in cols[:5])
        except ValueError:
            raise ValueError(f"plot line {n}: not numbers: {line.strip()[:80]!r}") from None
        points.append(
            PlotPoint(
                time=t,
                target_qps=target,
                sent_qps=sent,
                responses_qps=responses,
                failures_qps=failures,
            )
        )
    return tuple(points)


@dataclass(frozen=True, slots=True)
class PlotCapacity:
    capacity_qps: float  # highest served rate before the first bucket past the limit
    unserved_percent: float  # lost or failed, in that bucket
    limit_reached: bool  # some bucket lost or failed more than the limit


def capacity_from_plot(points: tuple[PlotPoint, ...], max_loss_percent: float) -> PlotCapacity:
    """resperf's own stopping rule (``print_statistics``: the best bucket before the first
    one whose loss exceeds the limit), counting failed answers as lost. Rates print with
    two decimals; the bucket interval cancels out of the ratios."""
    best, at = 0.0, 0.0
    for p in points:
        served = max(p.responses_qps - p.failures_qps, 0.0)
        unserved = (p.sent_qps - served) / p.sent_qps * 100.0 if p.sent_qps > 0 else 0.0
        if unserved > max_loss_percent:
            return PlotCapacity(capacity_qps=best, unserved_percent=at, limit_reached=True)
        if served > best:
            best, at = served, unserved
    return PlotCapacity(capacity_qps=best, unserved_percent=at, limit_reached=False)
