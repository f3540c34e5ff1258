"""One probe of a shared-socket batch (``udpbatch``): its slot and its end without an
answer; and a socket of the batch's pool."""

from __future__ import annotations

import socket
import time
from collections import deque

from dnsfleet.dnswire import Query
from dnsfleet.probes.reasons import Reason
from dnsfleet.probes.result import Exchange, unanswered
from dnsfleet.probes.sharedsock import Sockaddr, open_socket


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


class Shared:
    """A socket of the pool. ``peers``: a target's sockaddr (as recvfrom spells it) to its
    probe, or to its probes by ID if it has several here (a dict each: +3 MB at 10,000
    targets); an ended probe stays, so its late answer is dropped without a count."""

    __slots__ = ("errored", "fd", "peers", "pending", "sock")

    def __init__(self, family: socket.AddressFamily, rcvbuf: int) -> None:
        sock = self.sock = open_socket(family, rcvbuf)
        self.fd = sock.fileno()
        self.peers: dict[Sockaddr, Slot | dict[int, Slot]] = {}
        self.pending: deque[tuple[Slot, Sockaddr]] = deque()
        self.errored = False  # an error was read since the socket was last watched anew
