"""Random-subdomain ("water torture") detection per parent domain, in bounded memory.

What it is for: a random-subdomain flood sends queries for `<random>.victim.example`, every
name new, so every answer is NXDOMAIN (or SERVFAIL once the victim's servers give up) and the
resolver's cache cannot help. The dnstap aggregator feeds every client response to
`Detector.observe` and, at each scrape, exports `Detector.suspects` as
`dnsfleet_dnstap_random_subdomain_{suspect,distinct_children,nxdomain_ratio}{target,parent}`.
It renders nothing itself. Whatever arrives, the detector holds a bounded state and reports
at most `max_suspects` parents: 50,000 random names change values, never the series count.

Two stages per time window (after the prototype of research-26, §3):

1. every NXDOMAIN answer counts its parent (the registered domain, `psl.registered_domain`)
   in a Space-Saving table of `capacity` parents (`topn.SpaceSaving`: fewer than
   `2 * capacity` keys);
2. a parent whose guaranteed NXDOMAIN count reaches `min_nxdomain` is *tracked*: a
   4096-bit linear-counting bitmap (Whang, Vander-Zanden, Taylor 1990) of the distinct query
   names under it, and its answer and NXDOMAIN counts. At most `capacity` parents are
   tracked; when full, a new one replaces the tracked parent with the fewest NXDOMAIN answers
   if it has more. Estimate: n = -m ln(zeros / m), m = 4096: about 1.2 % standard error at
   1,000 distinct names, 3.6 % at 20,000; it saturates at m ln m = 34,069 (reported as that).

Windows: tumbling windows of `window` seconds. `suspects(now)` judges the union of the
previous and the current window (bitmaps OR-ed, counts added), so an attack is seen within
seconds of reaching the thresholds, and one that stops ages out within two windows. A
parent tracked with at least `min_nxdomain` NXDOMAIN answers in a window is tracked from the
start of the next one. A `now` earlier than the current window's start counts in it.

Memory: two windows of at most 2C ranked names plus C tracked parents (≈ 600 B each):
about 0.5 MB for C = 256 (measured in /work/notes/i26y.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from . import psl
from .topn import SpaceSaving

__all__ = ["BITS", "SATURATED", "Detector", "Suspect"]

BITS = 4096  # linear-counting bitmap per tracked parent, in bits
SATURATED = BITS * math.log(BITS)  # the estimate when every bit is set


@dataclass(frozen=True)
class Suspect:
    """A parent domain under a random-subdomain flood, over the last one or two windows."""

    parent: str
    distinct_children: float  # estimated distinct query names under the parent
    nxdomain_share: float  # NXDOMAIN answers / answers for the parent (0..1)
    rate: float  # answers per second for the parent
    responses: int  # answers counted for the parent while it was tracked


def estimate(bitmap: int) -> float:
    """Linear-counting estimate of the distinct names hashed into `bitmap` (BITS bits)."""
    zeros = BITS - bitmap.bit_count()
    return SATURATED if zeros == 0 else -BITS * math.log(zeros / BITS)


class _Parent:
    __slots__ = ("bitmap", "nxdomain", "responses", "score")

    def __init__(self, score: int) -> None:
        self.bitmap = bytearray(BITS // 8)
        self.nxdomain = 0
        self.responses = 0
        self.score = score  # NXDOMAIN answers this window (lower bound): eviction order


class _Window:
    __slots__ = ("rank", "start", "tracked")

    def __init__(self, start: float, capacity: int) -> None:
        self.start = start
        self.rank = SpaceSaving(capacity)
        self.tracked: dict[str, _Parent] = {}


class Detector:
    """Random-subdomain detector; thresholds are per judgement (previous + current window).

    window: seconds per window (30: judged over 30 to 60 s of answers).
    capacity: parents ranked (fewer than 2x this) and tracked (at most this) per window.
    min_nxdomain: NXDOMAIN answers a parent needs in a window before it is tracked (32).
    min_distinct: estimated distinct names under a parent to be a suspect (1,000).
    min_nxdomain_share: NXDOMAIN share of the parent's answers to be a suspect (0.5).
    max_suspects: suspects reported at most, most distinct names first (10).
    registered_domain: qname -> parent (the Public Suffix List's eTLD+1 by default).
    """

    def __init__(
        self,
        *,
        window: float = 30.0,
        capacity: int = 256,
        min_nxdomain: int = 32,
        min_distinct: float = 1000.0,
        min_nxdomain_share: float = 0.5,
        max_suspects: int = 10,
        registered_domain: Callable[[str], str] = psl.registered_domain,
    ) -> None:
        if not window > 0 or capacity < 1 or min_nxdomain < 1 or max_suspects < 0:
            raise ValueError("window > 0, capacity >= 1, min_nxdomain >= 1, max_suspects >= 0")
        self.window = float(window)
        self.capacity = capacity
        self.min_nxdomain = min_nxdomain
        self.min_distinct = min_distinct
        self.min_nxdomain_share = min_nxdomain_share
        self.max_suspects = max_suspects
        self._registered_domain = registered_domain
        self._current: _Window | None = None
        self._previous: _Window | None = None

    def watching(self) -> bool:
        """True while a parent is tracked: only then do answers other than NXDOMAIN count
        (a caller may skip decoding their names otherwise)."""
        return bool(self._current is not None and self._current.tracked)

    def observe(self, qname: str, nxdomain: bool, now: float, parent: str | None = None) -> None:
        """Count one answer (a CLIENT_RESPONSE) for `qname`; `nxdomain`: its rcode was 3;
        `parent`: its registered domain when the caller has it already."""
        current = self._roll(now)
        if not nxdomain and not current.tracked:
            return  # nothing tracked: only NXDOMAIN answers matter
        if parent is None:
            parent = self._registered_domain(qname)
        state = current.tracked.get(parent)
        if state is None:
            if not nxdomain:
                return
            rank = current.rank
            rank.add(parent)
            guaranteed = rank.guaranteed(parent)
            if guaranteed < self.min_nxdomain:
                return
            state = self._track(current, parent, guaranteed - 1)
            if state is None:
                return
        state.responses += 1
        if nxdomain:
            state.nxdomain += 1
            state.score += 1
        h = hash(qname.lower()) & (BITS - 1)
        state.bitmap[h >> 3] |= 1 << (h & 7)

    def _track(self, window: _Window, parent: str, score: int) -> _Parent | None:
        tracked = window.tracked
        if len(tracked) >= self.capacity:
            weakest = min(tracked, key=lambda name: tracked[name].score)
            if tracked[weakest].score >= score:
                return None
            del tracked[weakest]
        state = tracked[parent] = _Parent(score)
        return state

    def _roll(self, now: float) -> _Window:
        current = self._current
        if current is None:
            current = self._current = _Window(now, self.capacity)
            return current
        elapsed = int((now - current.start) // self.window)
        if elapsed < 1:
            return current
        following = _Window(current.start + elapsed * self.window, self.capacity)
        if elapsed == 1:
            for parent, state in current.tracked.items():
                if state.nxdomain >= self.min_nxdomain:
                    following.tracked[parent] = _Parent(self.min_nxdomain)
            self._previous = current
        else:
            self._previous = None
        self._current = following
        return following

    def suspects(self, now: float) -> list[Suspect]:
        """Parents over the thresholds in the previous and current windows, at most
        `max_suspects`, most distinct names first (ties by name)."""
        current = self._roll(now)
        windows = [w for w in (self._previous, current) if w is not None]
        merged: dict[str, tuple[int, int, int]] = {}
        for w in windows:
            for parent, state in w.tracked.items():
                bits, answers, nx = merged.get(parent, (0, 0, 0))
                bits |= int.from_bytes(state.bitmap, "little")
                merged[parent] = (bits, answers + state.responses, nx + state.nxdomain)
        span = max(now - windows[0].start, 1.0)
        found = []
        for parent, (bits, answers, nx) in merged.items():
            distinct = estimate(bits)
            share = nx / answers if answers else 0.0
            if distinct >= self.min_distinct and share >= self.min_nxdomain_share:
                found.append(Suspect(parent, distinct, share, answers / span, answers))
        found.sort(key=lambda s: (-s.distinct_children, s.parent))
        return found[: self.max_suspects]

    def sizes(self) -> tuple[int, int]:
        """(parents ranked, parents tracked) over both windows: the state's bound."""
        windows = [w for w in (self._previous, self._current) if w is not None]
        return sum(len(w.rank) for w in windows), sum(len(w.tracked) for w in windows)
