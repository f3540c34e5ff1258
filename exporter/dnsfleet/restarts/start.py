"""Restarts from the inside (see the package docstring): the restart judgement of a resolver
from its own statistics, :func:`judge_start`."""

from __future__ import annotations

from dataclasses import dataclass

UPTIME_GRANULARITY = 1.0  # PowerDNS Recursor and dnsdist: time(2) minus the start, in seconds
# Slack beyond granularity and read windows: a stated start time that moves by this much or
# less is the same process (CoreDNS's process_start_time_seconds adds /proc/stat's btime,
# which the kernel recomputes from the wall clock: it moves by a second now and then).
START_TOLERANCE = 1.0


@dataclass(frozen=True, slots=True)
class StartReading:
    """What one read of a resolver's statistics says about its process. ``sent`` and
    ``received`` are monotonic times around the read (the resolver read its clock somewhere
    between them); ``wall`` is epoch seconds at ``received``."""

    start_time: float | None  # as the resolver states it
    uptime: float | None  # or its uptime in whole seconds
    queries: int  # a counter that starts from zero with the process
    sent: float
    received: float
    wall: float

    def estimate(self) -> float | None:
        """The start time this reading alone implies."""
        if self.start_time is not None:
            return self.start_time
        if self.uptime is None:
            return None
        # The middle of the read window; whole seconds, as the uptime is.
        return float(round(self.wall - (self.received - self.sent) / 2 - self.uptime))


@dataclass(frozen=True, slots=True)
class StartJudgement:
    """The start time to export (None: the resolver gives none), the restarts judged since
    the exporter started, and the reading the next judgement compares with."""

    start_time: float | None
    restarts: int
    last: StartReading


def judge_start(prev: StartJudgement | None, r: StartReading) -> StartJudgement:
    """Pure: did the resolver restart since ``prev``? The exported start time moves only when
    it did; otherwise the one exported before is kept.

    - Uptime: the same process shows at least ``uptime_before + (least time between the two
      reads) - granularity``; anything lower by more than :data:`START_TOLERANCE` is a new
      process. The elapsed time is monotonic, so a step of this host's clock changes
      nothing. A step of the *resolver's* clock moves its uptime (PowerDNS and dnsdist count
      it on the wall clock): forward is ignored, backward by more than 2 s reads as a restart.
    - A stated start time: a restart when it moved forward by more than the tolerance.
    - Neither (Knot Resolver without ``process_start_time_seconds``): a restart when the
      query counter went backwards; no start time is exported.

    Blind spots: two restarts between two scrapes count once (only the last process is
    seen); a process replaced within ~2 s of its own start, when the previous read caught it
    in those 2 s, looks like the same process; without a start time or uptime, a new process
    that answered more queries by the next read than the old one had at the previous read
    is not seen."""
    if prev is None:
        return StartJudgement(r.estimate(), 0, r)
    p = prev.last
    if r.uptime is not None and p.uptime is not None:
        least_elapsed = max(r.sent - p.received, 0.0)
        restarted = r.uptime < p.uptime + least_elapsed - UPTIME_GRANULARITY - START_TOLERANCE
    elif r.start_time is not None and p.start_time is not None:
        restarted = r.start_time - p.start_time > START_TOLERANCE
    else:
        restarted = r.queries < p.queries
    if restarted:
        return StartJudgement(r.estimate(), prev.restarts + 1, r)
    kept = prev.start_time if prev.start_time is not None else r.estimate()
    return StartJudgement(kept, prev.restarts, r)
