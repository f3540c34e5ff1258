"""The zone checks' side of the network: each nameserver asked within its own deadline,
holding one socket of the cycle's open-file share at a time.

A nameserver's deadline is the zone's ``timeout`` from the moment it is asked, shared by
every query to it (SOA, then DNSKEY, each over UDP and again over TCP when truncated) and
capped by the scrape's: a nameserver that truncates and then stalls over TCP costs its own
series only, never twice the timeout, and never the collector's other series. Its queries
go one after another so that it holds one descriptor at a time: a silent nameserver holds
one socket for the timeout, not two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, TypeVar

from dns.rcode import NOERROR

from dnsfleet.config import Endpoint
from dnsfleet.dnswire import Malformed, Query, build_query, decode_message, rcode_text
from dnsfleet.probes import tcp, udp
from dnsfleet.probes.reasons import classify_oserror
from dnsfleet.probes.result import Exchange

T = TypeVar("T")


class ZoneReason(StrEnum):
    """Why a nameserver gave no usable answer: a closed set (the ``reason`` label)."""

    TIMEOUT = "timeout"  # nothing usable within its deadline
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    TRUNCATED = "truncated"
    MALFORMED = "malformed"
    NETWORK_ERROR = "network_error"
    RCODE = "rcode"  # an rcode other than NOERROR
    NOT_AUTHORITATIVE = "not_authoritative"  # no AA: it does not serve the zone
    NO_SOA = "no_soa"
    NOT_ASKED = "not_asked"  # no socket of the open-file share came free before the deadline
    INTERNAL_ERROR = "internal_error"  # a bug here, logged with its traceback


class ZoneError(Exception):
    """A nameserver gave no usable answer: the reason, and the detail for the log."""

    def __init__(self, reason: ZoneReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason


def reason_of(e: BaseException) -> ZoneReason:
    if isinstance(e, ZoneError):
        return e.reason
    if isinstance(e, OSError):
        return ZoneReason(classify_oserror(e).value)
    return ZoneReason.INTERNAL_ERROR


def _exchange_error(ex: Exchange) -> ZoneError:
    value = ex.error.value if ex.error is not None else ""
    reason = ZoneReason(value) if value in ZoneReason._value2member_map_ else None
    return ZoneError(reason or ZoneReason.NETWORK_ERROR, f"{value or 'error'}: {ex.detail}")


class Asker:
    """Asks nameservers within the cycle's descriptor share (``slots``: sockets the zone
    checks may hold at once) and the scrape's end (``hard_end``, loop time)."""

    def __init__(self, *, slots: int, hard_end: float) -> None:
        self.slots = asyncio.Semaphore(max(1, slots))
        self.hard_end = hard_end

    async def run(self, timeout: float, work: Callable[[float], Awaitable[T]]) -> T:
        """``work(end)`` once a socket is free, with its own deadline ``end``: ``timeout``
        from now, at most the scrape's end. ZoneError when none came free in time or the
        work overran its deadline."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(self.hard_end):
                await self.slots.acquire()
        except TimeoutError:
            raise ZoneError(
                ZoneReason.NOT_ASKED,
                "no socket of the open-file share came free before the scrape deadline",
            ) from None
        try:
            end = min(loop.time() + timeout, self.hard_end)
            try:
                async with asyncio.timeout_at(end):
                    return await work(end)
            except TimeoutError:
                raise ZoneError(ZoneReason.TIMEOUT, "no answer within the zone's timeout") from None
        finally:
            self.slots.release()


async def ask(ep: Endpoint, zone: str, qtype: int, end: float) -> Any:
    """One question, over UDP and again over TCP when truncated, both by ``end`` (loop
    time); the decoded dns.message.Message (dnspython is imported lazily)."""
    loop = asyncio.get_running_loop()
    query: Query = build_query(
        zone, qtype, recursion_desired=False, dnssec_ok=True, nsid=False, payload=1232
    )
    ex = await udp.exchange(
        sockaddr=ep.sockaddr, family=ep.family, query=query, timeout=end - loop.time()
    )
    if ex.response is not None and ex.response.truncated:
        left = end - loop.time()
        if left <= 0:
            raise ZoneError(ZoneReason.TIMEOUT, "truncated over UDP, no time left for TCP")
        ex = await tcp.exchange(sockaddr=ep.sockaddr, family=ep.family, query=query, timeout=left)
    if ex.response is None:
        raise _exchange_error(ex)
    try:
        msg = decode_message(ex.response.wire)
    except Malformed as e:
        raise ZoneError(ZoneReason.MALFORMED, str(e)) from None
    if msg.rcode() != NOERROR:
        raise ZoneError(ZoneReason.RCODE, f"rcode {rcode_text(msg.rcode())}")
    return msg
