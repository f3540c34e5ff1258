"""Expiries' sweep calls back into its callers: a probe that times out answers its /probe
request, and the server starts the connection's next (pipelined) request from that same
callback, whose probe is added to the Expiries being swept. What is added so must stay
waiting, and the timer must come for it, whatever the groups the add dropped or made."""

from __future__ import annotations

from typing import Any

import pytest

from dnsfleet.probes import expiry

pytestmark = pytest.mark.unit


class Clock:
    """A loop's time and timers, driven by hand: no sleeping, no thresholds."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, fn: Any, *args: Any) -> Timer:
        t = Timer(when, fn, args)
        self.timers.append(t)
        return t

    def run_due(self) -> None:
        """Run the timers due now, the earliest first, as a loop would."""
        for t in sorted(self.timers, key=lambda t: t.when):
            if t.when <= self.now and not t.cancelled:
                self.timers.remove(t)
                t.fn(*t.args)

    def next_at(self) -> float:
        return min(t.when for t in self.timers if not t.cancelled)


class Timer:
    def __init__(self, when: float, fn: Any, args: tuple[Any, ...]) -> None:
        self.when, self.fn, self.args = when, fn, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Item:
    def __init__(self, on_expire: Any = None) -> None:
        self.group: dict[Any, float] | None = None
        self.expired: float | None = None
        self.on_expire = on_expire

    def end(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            del group[self]

    def expire(self, timeout: float) -> None:
        self.end()
        self.expired = timeout
        if self.on_expire is not None:
            self.on_expire()


def crowded(clock: Clock, exp: expiry.Expiries) -> list[float]:
    """GROUPS - 1 timeout groups whose probes have all ended (answered since the last
    sweep): the next new timeout makes add drop them."""
    timeouts = [100.0 + i for i in range(expiry.GROUPS - 1)]
    for t in timeouts:
        it = Item()
        exp.add(clock, it, t)  # type: ignore[arg-type]
        it.end()
    return timeouts


def test_a_probe_added_while_its_group_is_swept_stays_waiting_and_times_out() -> None:
    """The probe that times out first answers; from that answer come requests under a new
    timeout (the add drops every emptied group, the swept one included) and under the
    swept one's and an emptied group's timeouts again. Each must time out in its turn."""
    clock, exp = Clock(), expiry.Expiries()
    added: list[tuple[Item, float]] = []

    def pipelined() -> None:
        for t in (200.0, 0.5, 101.0):
            it = Item()
            exp.add(clock, it, t)  # type: ignore[arg-type]
            added.append((it, t))

    first = Item(pipelined)
    exp.add(clock, first, 0.5)  # type: ignore[arg-type]
    crowded(clock, exp)
    clock.now += 0.5
    clock.run_due()
    assert first.expired == 0.5
    for it, t in added:
        assert it.group is not None and exp.waiting.get(t) is it.group, t
    for _ in range(10):  # each sweep ends at least one of the three
        if all(it.expired is not None for it, _ in added):
            break
        clock.now = clock.next_at()
        clock.run_due()
    assert [it.expired for it, _ in added] == [t for _, t in added]


def test_the_timer_stays_at_the_earliest_expiry_after_a_sweep_that_added() -> None:
    """A probe added during the sweep, earlier than what is left of the others, is timed
    out at its own expiry, and one timer stays armed, not two."""
    clock, exp = Clock(), expiry.Expiries()
    late = Item()
    exp.add(clock, late, 0.1)  # type: ignore[arg-type]
    exp.add(clock, Item(), 50.0)  # type: ignore[arg-type]
    soon = Item()
    exp.add(clock, Item(lambda: exp.add(clock, soon, 1.0)), 0.1)  # type: ignore[arg-type]
    clock.now += 0.1
    clock.run_due()
    armed = [t for t in clock.timers if not t.cancelled]
    assert [t.when for t in armed] == [clock.now + 1.0]
    clock.now += 1.0
    clock.run_due()
    assert soon.expired == 1.0
