"""What a capacity figure is worth on a busy host: each resperf run judged on its own (did
the resolver or the sending client set the limit?), then the repeats of one kind summed up
as a median and a spread, and the contradictions between them named instead of recorded as
a capacity. Pure: plot rows, resperf's "fell behind", the client's CPU time and the wall
time in, verdicts and the measurement to record out (capacity/command.py runs resperf;
capacity/model.py keeps the state file).

Why these rules (dnsperf ``src/resperf.c`` and runs on a shared 2-core host):

- resperf never blocks while it sends: its send loop polls without waiting, so it wants a
  whole core at any rate. A share of a core well below 1 over the sending (``client_cpu_
  seconds / send_seconds``, the plot's last sending bucket; the ``-t`` wait for late
  answers after it costs little CPU) is the share it was denied, and its send schedule
  and receive timing with it: the figure then measures the host's contention, not the
  resolver.
- When it falls behind its schedule by 1,000 queries it prints "Fell behind" and stops
  sending; nothing after that measures the resolver, and a loss there is its own.
- Before that, a bucket that sent well under its target rate is the same slip, earlier.
- One lossy half-second bucket is noise on a busy host; the loss limit must hold for
  :data:`SUSTAIN_BUCKETS` buckets in a row to be the resolver's limit.
- The figures come in steps of ``max_qps / ramp x 0.5 s`` (one bucket of the ramp), so no
  spread limit can be tighter than two steps.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dnsfleet.capacity.model import Measurement, QueryFile, RunRecord, cpu_share
from dnsfleet.parsers.resperf import PlotCapacity, PlotPoint, ResperfResult

SUSTAIN_BUCKETS = 2
MIN_CLIENT_CPU_SHARE = 0.90  # default of --min-client-cpu
SCHEDULE_SLIP = 0.95  # a bucket that sent less than this share of its target rate
SCHEDULE_MIN_QPS = 100.0  # ... judged only where the target is this high (rounding)
SPREAD_LIMIT = 0.25  # (max - min) / median over the repeats, at least two ramp steps
BUCKET_SECONDS = 0.5  # resperf's default -i


def send_seconds(points: Sequence[PlotPoint], wall_seconds: float) -> float:
    """How long resperf sent: to the end of the last bucket that sent anything."""
    sent = [p.time for p in points if p.sent_qps > 0]
    return min(max(sent) + BUCKET_SECONDS, wall_seconds) if sent else wall_seconds


@dataclass(frozen=True, slots=True)
class PlotVerdict:
    capacity_qps: float
    lost_percent: float
    limit_index: int | None  # the first bucket of the sustained loss, None if never
    spikes: int
    schedule_slipped: bool  # a bucket before the limit sent < SCHEDULE_SLIP of its target


@dataclass(frozen=True, slots=True)
class RunOutput:
    """What one resperf run gave: its summary, the plot, and what it cost the client."""

    result: ResperfResult  # resperf's summary (its figure counts SERVFAIL as served)
    plot: PlotCapacity  # resperf's own rule on the plot, failures counted as lost
    command: tuple[str, ...]
    points: tuple[PlotPoint, ...] = ()
    client_cpu_seconds: float = 0.0  # resperf's user + system time
    wall_seconds: float = 0.0


def judge_plot(
    points: Sequence[PlotPoint], max_loss_percent: float, sustain: int = SUSTAIN_BUCKETS
) -> PlotVerdict:
    """resperf's rule (the best bucket before the loss passes the limit, failures counted
    as lost), with the limit required to hold ``sustain`` buckets in a row."""
    best, at, spikes, run_start = 0.0, 0.0, 0, None
    slipped = False
    for i, p in enumerate(points):
        served = max(p.responses_qps - p.failures_qps, 0.0)
        unserved = (p.sent_qps - served) / p.sent_qps * 100.0 if p.sent_qps > 0 else 0.0
        if unserved > max_loss_percent:
            run_start = i if run_start is None else run_start
            if i - run_start + 1 >= sustain:
                return PlotVerdict(best, at, run_start, spikes, slipped)
            continue
        if run_start is not None:
            spikes += 1
            run_start = None
        # The last bucket is cut short when the ramp ends: its rate is not a slip.
        last = i == len(points) - 1
        if (
            not last
            and p.target_qps >= SCHEDULE_MIN_QPS
            and p.sent_qps < SCHEDULE_SLIP * p.target_qps
        ):
            slipped = True
        if served > best:
            best, at = served, unserved
    # A loss still running when the plot ends is too short to call sustained.
    if run_start is not None:
        spikes += 1
    return PlotVerdict(best, at, None, spikes, slipped)


def judge_run(
    points: Sequence[PlotPoint],
    *,
    max_loss_percent: float,
    fell_behind: bool,
    client_cpu_seconds: float,
    wall_seconds: float,
    min_client_cpu_share: float = MIN_CLIENT_CPU_SHARE,
    queries_sent: int = 0,
    queries_completed: int = 0,
    resperf_max_qps: float = 0.0,
) -> RunRecord:
    v = judge_plot(points, max_loss_percent)
    reached = v.limit_index is not None
    # A loss that starts in the last buckets of a run resperf ended early is its stopping.
    stopped_early = fell_behind and (
        v.limit_index is None or v.limit_index >= len(points) - SUSTAIN_BUCKETS
    )
    sending = send_seconds(points, wall_seconds)
    share = cpu_share(client_cpu_seconds, sending)
    client = stopped_early or v.schedule_slipped or share < min_client_cpu_share
    return RunRecord(
        capacity_qps=v.capacity_qps,
        limit="client" if client else "loss" if reached else "ramp",
        lost_percent=v.lost_percent,
        loss_spikes=v.spikes,
        fell_behind=fell_behind,
        client_cpu_seconds=client_cpu_seconds,
        wall_seconds=wall_seconds,
        send_seconds=sending,
        queries_sent=queries_sent,
        queries_completed=queries_completed,
        resperf_max_qps=resperf_max_qps,
    )


@dataclass(frozen=True, slots=True)
class Summary:
    capacity_qps: float  # median of the runs the resolver limited (of all, if none did)
    lower_bound: bool
    limit: str
    spread: float | None  # (max - min) / median of those runs; None with fewer than two
    spread_limit: float
    contradictions: tuple[str, ...]
    representative: RunRecord  # the run whose figure is the (low) median


def spread_limit(median: float, *, max_qps: int, ramp: int) -> float:
    step = max_qps / ramp * BUCKET_SECONDS
    return max(SPREAD_LIMIT, 2 * step / median) if median > 0 else SPREAD_LIMIT


def summarise(runs: Sequence[RunRecord], *, max_qps: int, ramp: int) -> Summary:
    """The repeats of one kind. Fewer than two runs the resolver limited (one, when only
    one run was asked for) is ``client_bound``: no capacity; a spread above
    :func:`spread_limit` is ``spread``."""
    if not runs:
        raise ValueError("no runs to summarise")
    valid = [r for r in runs if r.limit != "client"]
    pool = valid or list(runs)
    figures = [r.capacity_qps for r in pool]
    median = statistics.median(figures)
    low = statistics.median_low(figures)
    representative = next(r for r in pool if r.capacity_qps == low)
    spread = (max(figures) - min(figures)) / median if len(pool) >= 2 and median > 0 else None
    limit_ = spread_limit(median, max_qps=max_qps, ramp=ramp)
    contradictions: list[str] = []
    if len(valid) < min(2, len(runs)):
        contradictions.append("client_bound")
    elif spread is not None and spread > limit_:
        contradictions.append("spread")
    all_loss = bool(valid) and all(r.limit == "loss" for r in valid)
    return Summary(
        capacity_qps=median,
        lower_bound=not all_loss,
        limit="client" if not valid else "loss" if all_loss else "ramp",
        spread=spread,
        spread_limit=limit_,
        contradictions=tuple(contradictions),
        representative=representative,
    )


EXPLAIN = {
    "client_bound": "the sending client, not the resolver, set the limit in too many runs "
    "(resperf fell behind, slipped its schedule or got less than {min_cpu:.0%} of a core): "
    "run it from a quieter or bigger host",
    "spread": "the runs disagree by more than {limit:.0%} of their median: the host's load "
    "moved the figure; repeat in a quieter window or with more --runs",
    "miss_above_hit": "the cache-miss figure is above the cache-hit one, which a resolver "
    "cannot do: one of them measured something else (contention, a warm miss zone)",
}


def measurement_of(
    kind: str,
    runs: Sequence[RunRecord],
    *,
    max_qps: int,
    ramp: int,
    max_loss: float,
    command: tuple[str, ...],
    queries: QueryFile | None,
) -> Measurement:
    """The runs of one kind as the state file records them: the summary's figure, the
    representative run's details, every run, the spread and the contradictions."""
    s = summarise(runs, max_qps=max_qps, ramp=ramp)
    rep = s.representative
    return Measurement(
        kind=kind,
        capacity_qps=s.capacity_qps,
        lower_bound=s.lower_bound,
        limit=s.limit,
        measured_at=time.time(),
        lost_percent=rep.lost_percent,
        max_loss_percent=max_loss,
        resperf_max_qps=rep.resperf_max_qps,
        max_qps_offered=max_qps,
        ramp_seconds=ramp,
        queries_sent=rep.queries_sent,
        queries_completed=rep.queries_completed,
        resperf=command,
        queries=queries,
        runs=tuple(runs),
        spread=s.spread,
        contradictions=s.contradictions,
    )


def with_contradiction(m: Measurement, reason: str) -> Measurement:
    if reason in m.contradictions:
        return m
    return dataclasses.replace(m, contradictions=(*m.contradictions, reason))


def cross_check(measured: Mapping[str, Measurement]) -> dict[str, Measurement]:
    """Hit against miss (this run's, or the other kind already recorded): a miss figure
    above the hit one contradicts both. Checked whatever else is recorded against either:
    a miss whose runs spread widely but all lie above the hit figure still shows that
    figure wrong (a rate-limited name), and with it recorded the hit figure is no longer
    exported as a capacity."""
    hit, miss = measured.get("hit"), measured.get("miss")
    if hit is None or miss is None:
        return dict(measured)
    # The lowest miss figure any run gave: what every run agrees the resolver can do.
    lowest_miss = min((r.capacity_qps for r in miss.runs), default=miss.capacity_qps)
    if lowest_miss > hit.capacity_qps:
        return {k: with_contradiction(m, "miss_above_hit") for k, m in measured.items()}
    return dict(measured)


def warning(key: str, m: Measurement, min_client_cpu: float) -> str:
    """The stderr line of each contradiction of ``m``."""
    lines = []
    for reason in m.contradictions:
        limit = spread_limit(m.capacity_qps, max_qps=m.max_qps_offered, ramp=m.ramp_seconds)
        spread = "" if m.spread is None else f" (spread {m.spread:.0%})"
        runs = ", ".join(
            f"{r.capacity_qps:.0f} qps ({r.limit}, {r.client_cpu_share:.2f} of a core)"
            for r in m.runs
        )
        lines.append(
            f"dnsfleet capacity-test: warning: {key} {m.kind}: {reason}{spread}: "
            + EXPLAIN[reason].format(min_cpu=min_client_cpu, limit=limit)
            + f"; per run: {runs}. Recorded as a contradiction, not as a capacity."
        )
    return "\n".join(lines)


def measure_runs(
    kind: str,
    run_once: Callable[[], RunOutput],
    *,
    runs: int,
    max_qps: int,
    ramp: int,
    max_loss: float,
    min_client_cpu: float,
    queries: QueryFile | None,
) -> Measurement:
    """``runs`` runs of one kind, each judged, summed up as the state file records them."""
    records: list[RunRecord] = []
    command: tuple[str, ...] = ()
    for _ in range(runs):
        run = run_once()
        r, command = run.result, run.command
        judged = judge_run(
            run.points,
            max_loss_percent=max_loss,
            fell_behind=r.fell_behind,
            client_cpu_seconds=run.client_cpu_seconds,
            wall_seconds=run.wall_seconds,
            min_client_cpu_share=min_client_cpu,
            queries_sent=r.queries_sent,
            queries_completed=r.queries_completed,
            resperf_max_qps=r.max_qps,
        )
        if judged.limit == "loss" and judged.capacity_qps == 0:
            raise RuntimeError(
                f"the {kind} run lost or failed more than {max_loss:g}% of its queries from "
                "the first bucket on: no capacity to record (is the resolver answering? else "
                "start lower: a smaller --max-qps or a longer --ramp)"
            )
        records.append(judged)
    return measurement_of(
        kind,
        records,
        max_qps=max_qps,
        ramp=ramp,
        max_loss=max_loss,
        command=command,
        queries=queries,
    )


def describe(m: Measurement) -> str:
    bound = {
        "loss": f"the loss passed {m.max_loss_percent:g}% above it",
        "ramp": f"a LOWER BOUND: the loss never passed {m.max_loss_percent:g}% up to the end "
        f"of the ramp (raise --max-qps above {m.max_qps_offered})",
        "client": "a LOWER BOUND: resperf fell behind its schedule (the sending host is the "
        "limit; run it from a bigger host or several)",
    }.get(m.limit, "")
    runs = (
        f"median of {len(m.runs)} runs, spread {m.spread:.0%}; "
        if m.spread is not None and len(m.runs) > 1
        else ""
    )
    return (
        f"{m.kind} capacity {m.capacity_qps:.0f} qps answered ({runs}resperf's figure, "
        f"failures included: {m.resperf_max_qps:.0f}), {m.lost_percent:.2f}% lost or failed "
        f"at that point; {bound}"
    )
