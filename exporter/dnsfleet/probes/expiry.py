"""The timeouts of concurrent single exchanges behind one loop timer (udp.py's).

A TimerHandle per probe is asyncio's Python-level handle in a heap ordered by a Python
``__lt__``, then a cancel: under /probe load that cost more than the rest of an exchange's
bookkeeping. Here probes wait in groups by timeout, each group a dict in the order its
probes were sent, which is the order they expire in; a probe that ends takes itself out of
its group (O(1)), so the timer, at the earliest expiry, passes over no ended probes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

# Timeout groups kept before the empty ones are dropped between two sweeps.
GROUPS = 32


class Expiring(Protocol):
    # The group it waits in, set by Expiries.add; whoever ends the probe deletes it from
    # there and sets None.
    group: dict[Any, float] | None

    def expire(self, timeout: float) -> None:
        """Time out now, unless it has ended; either way it leaves its group."""


class Expiries:
    def __init__(self) -> None:
        self.waiting: dict[float, dict[Any, float]] = {}
        self.purge_at = GROUPS
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0

    def add(self, loop: asyncio.AbstractEventLoop, item: Expiring, timeout: float) -> None:
        """``item`` times out ``timeout`` seconds from now unless it ends first."""
        expires = loop.time() + timeout
        group = self.waiting.get(timeout)
        if group is None:
            if len(self.waiting) >= self.purge_at:
                # Groups emptied since the last sweep (each client's scrape timeout can
                # make its own): dropped here too, so that they cannot pile up between two.
                for t in [t for t, g in self.waiting.items() if not g]:
                    del self.waiting[t]
                self.purge_at = max(GROUPS, 2 * len(self.waiting))
            group = self.waiting[timeout] = {}
        group[item] = expires
        item.group = group
        if self.timer is None or expires < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(expires, self._sweep, loop)
            self.timer_at = expires

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer = None
        now = loop.time()
        earliest: float | None = None
        for timeout, group in list(self.waiting.items()):
            while group:
                item = next(iter(group))
                if group[item] > now:
                    first = group[item]
                    earliest = first if earliest is None or first < earliest else earliest
                    break
                item.expire(timeout)  # ends it, which takes it out of the group
                group.pop(item, None)
            # An expiry answers its request, and the connection's next, pipelined, is
            # started from that callback: its add may have dropped this group and made
            # another for the timeout, which is not this one's to delete.
            if not group and self.waiting.get(timeout) is group:
                del self.waiting[timeout]
        # Such an add armed the timer too when its expiry was the earliest.
        if earliest is not None and (self.timer is None or earliest < self.timer_at):
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(earliest, self._sweep, loop)
            self.timer_at = earliest
