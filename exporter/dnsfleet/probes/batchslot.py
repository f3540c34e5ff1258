"""One probe of a shared-socket batch (``udpbatch``): its slot and its end without an
answer."""

from __future__ import annotations

import time

from dnsfleet.dnswire import Query
from dnsfleet.probes.reasons import Reason
from dnsfleet.probes.result import Exchange, unanswered


class Slot:
    """One probe of the batch: its ID, whether it was sent, whether it has ended."""

    __slots__ = ("budget", "ended", "ignored", "index", "qid", "query", "sent", "start")

    def __init__(self, index: int, query: Query, budget: float) -> None:
        self.index = index
        self.query = query
        self.budget = budget
        self.qid = 0
        self.ignored = 0
        self.sent = False
        self.ended = False
        self.start = time.monotonic()


def since(slot: Slot) -> float:
    return time.monotonic() - slot.start


def expired(slot: Slot) -> Exchange:
    if not slot.sent:
        detail = f"not sent within {slot.budget:.3g}s: the socket's send buffer stayed full"
        return Exchange(None, Reason.TIMEOUT, since(slot), detail)
    return unanswered(slot.ignored, slot.budget, since(slot))
