"""The resolvers' connections to the dnstap listener: Frame Streams in, frames to the
aggregator, and the slots they hold.

At most ``max_connections`` writers are connected at once. When every slot is taken, a new
writer takes the slot of the one that has been idle (sent nothing) the longest, provided
that one has been idle for at least ``evict_idle`` seconds (a second by default); otherwise
the new writer is refused. Writers that never sent a data frame go first: a resolver whose
stream has carried frames is cut only when no such writer is there. So writers that
connect and then stay silent can neither lock a real resolver out nor push a quiet one out
(a resolver quiet for a second was the longest idle, and each new silent writer cut it),
while writers that are all busy are never churned by one more.
"""

from __future__ import annotations

import asyncio
from typing import cast

from dnsfleet.dnstap.aggregate import Aggregator
from dnsfleet.dnstap.framestreams import ProtocolError, Receiver, State
from dnsfleet.dnstap.protocol import IngestSettings


class Slots:
    """The writer connections open, oldest first."""

    def __init__(self, agg: Aggregator, settings: IngestSettings) -> None:
        self.agg = agg
        self.settings = settings
        self.limit = settings.max_connections
        self.evict_idle = settings.evict_idle
        self.open: dict[Stream, None] = {}

    def stream(self) -> Stream:
        return Stream(self)

    def admit(self, stream: Stream, now: float) -> bool:
        """Give ``stream`` a slot, freeing the longest-idle one when all are taken."""
        if len(self.open) >= self.limit:
            silent = [s for s in self.open if not s.carried]
            idlest = min(silent or self.open, key=lambda s: s.last_active)
            if now - idlest.last_active < self.evict_idle:
                self.agg.error("too_many_connections")
                return False
            idlest.cut("idle_evicted")
        self.open[stream] = None
        self.agg.connections_total += 1
        self.agg.connections_open = len(self.open)
        return True

    def release(self, stream: Stream) -> None:
        if stream in self.open:
            del self.open[stream]
            self.agg.connections_open = len(self.open)

    def close_all(self) -> None:
        for s in list(self.open):
            s.cut(None)


class Stream(asyncio.Protocol):
    """One writer's connection."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.agg = slots.agg
        self.rx = Receiver()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.last_active = 0.0
        self.carried = False  # a data frame came on this stream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: the type says what it is.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self.last_active = asyncio.get_running_loop().time()
        if not self.slots.admit(self, self.last_active):
            transport.abort()
            return
        self._arm(self.slots.settings.handshake_timeout, "handshake_timeout")

    def _arm(self, delay: float, reason: str) -> None:
        if self.timer is not None:
            self.timer.cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(delay, self._expire, reason)

    def _expire(self, reason: str) -> None:
        self.timer = None
        if reason == "idle_timeout" and not self.rx.buffered:
            return  # a quiet resolver between frames: nothing is wrong
        self.cut(reason)

    def cut(self, reason: str | None) -> None:
        """Close the connection at once, counted under ``reason`` when there is one."""
        if reason is not None:
            self.agg.error(reason)
        self.slots.release(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self not in self.slots.open:
            return  # cut: the transport is closing
        self.last_active = asyncio.get_running_loop().time()
        try:
            frames, reply, done = self.rx.feed(data)
        except ProtocolError as e:
            self.cut(e.refusal.value)
            return
        if frames:
            self.carried = True
            self.agg.ingest(frames)
        if reply:
            self.transport.write(reply)
        if done:
            self.slots.release(self)
            self.transport.close()
        elif self.rx.state is State.DATA:
            self._arm(self.slots.settings.idle_timeout, "idle_timeout")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.slots.release(self)
