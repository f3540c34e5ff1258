"""Bounded insight per target: the top registered domains by NXDOMAIN and by SERVFAIL, the
top client addresses, and random-subdomain suspects.

Counts are per window of :data:`WINDOW` seconds: the families show the last complete
window, so a top-N value reads "responses in the last minute". Series are bounded by
``top_n`` (at most :data:`MAX_TOP_N`) per target and kind, the detector's ``max_suspects``,
and :data:`MAX_ANALYSED` targets (further targets get counters only).
"""

from __future__ import annotations

import socket

from dns.rcode import NXDOMAIN, SERVFAIL

from dnsfleet.dnstap import psl
from dnsfleet.dnstap.subdomains import Detector
from dnsfleet.dnstap.topn import SpaceSaving
from dnsfleet.dnswire import name_text, rcode_text
from dnsfleet.exposition import Family

WINDOW = 60.0
MAX_TOP_N = 50
MAX_ANALYSED = 16
KINDS = (NXDOMAIN, SERVFAIL)  # the rcodes whose registered domains are counted


class Windowed:
    """A Space-Saving table per window; the last complete window is what is shown."""

    __slots__ = ("capacity", "current", "shown", "start")

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.current = SpaceSaving(capacity)
        self.shown: list[tuple[str, int]] = []
        self.start = now

    def roll(self, now: float, n: int) -> None:
        if now - self.start < WINDOW:
            return
        # A window with nothing after it (no event for two windows) shows nothing.
        self.shown = self.current.top(n) if now - self.start < 2 * WINDOW else []
        self.current = SpaceSaving(self.capacity)
        self.start = now - (now - self.start) % WINDOW


class TargetInsight:
    def __init__(self, top_n: int, now: float) -> None:
        self.top_n = top_n
        capacity = max(4 * top_n, 64)  # heavy hitters are exact well within 4x N
        self.domains = {k: Windowed(capacity, now) for k in KINDS}
        self.clients = Windowed(capacity, now)
        self.detector = Detector(window=WINDOW / 2, max_suspects=top_n)

    def roll(self, now: float) -> None:
        for w in (*self.domains.values(), self.clients):
            w.roll(now, self.top_n)


class Insight:
    """Fed every CLIENT_RESPONSE's client address, rcode and question name."""

    def __init__(self, top_n: int) -> None:
        self.top_n = min(max(top_n, 0), MAX_TOP_N)
        self.targets: dict[str, TargetInsight] = {}

    def observe(self, target: str, client: bytes, rcode: int, qname: bytes, now: float) -> None:
        if not self.top_n:
            return
        t = self.targets.get(target)
        if t is None:
            if len(self.targets) >= MAX_ANALYSED:
                return
            t = self.targets[target] = TargetInsight(self.top_n, now)
        t.roll(now)
        t.clients.current.add(client.decode("latin-1"))
        nx = rcode == NXDOMAIN
        if nx or rcode == SERVFAIL or t.detector.watching():
            name = name_text(qname)
            parent = None
            if nx or rcode == SERVFAIL:
                parent = psl.registered_domain(name)
                t.domains[NXDOMAIN if nx else SERVFAIL].current.add(parent)
            t.detector.observe(name, nx, now, parent)

    def families(self, labels: dict[str, dict[str, str]], now: float) -> list[Family]:
        dom = Family(
            "dnsfleet_dnstap_top_domain_responses",
            "NXDOMAIN or SERVFAIL responses in the last complete minute for the registered "
            "domains (Public Suffix List) with the most of them, top_n per target and rcode.",
        )
        cli = Family(
            "dnsfleet_dnstap_top_client_responses",
            "Responses in the last complete minute to the client addresses with the most, "
            "top_n per target.",
        )
        sus = Family(
            "dnsfleet_dnstap_random_subdomain_suspect",
            "1 for a parent domain whose queries look like a random-subdomain flood: many "
            "distinct names, mostly NXDOMAIN, over the last 30 to 60 s.",
        )
        kids = Family(
            "dnsfleet_dnstap_random_subdomain_distinct_children",
            "Estimated distinct query names under a suspect parent over the last 30 to 60 s.",
        )
        ratio = Family(
            "dnsfleet_dnstap_random_subdomain_nxdomain_ratio",
            "Share of a suspect parent's responses that were NXDOMAIN over the last 30 to 60 s.",
        )
        for target, t in self.targets.items():
            t.roll(now)
            lab = labels.get(target, {"target": target})
            for kind, w in t.domains.items():
                for domain, n in w.shown:
                    dom.add(n, {**lab, "rcode": rcode_text(kind), "domain": domain})
            for client, n in t.clients.shown:
                cli.add(n, {**lab, "client": client_text(client)})
            for s in t.detector.suspects(now):
                parent = {**lab, "parent": s.parent}
                sus.add(1, parent)
                kids.add(round(s.distinct_children), parent)
                ratio.add(round(s.nxdomain_share, 4), parent)
        st = psl.status()
        info = Family(
            "dnsfleet_dnstap_public_suffix_list_info",
            'The Public Suffix List registered domains come from: source "file" (with its '
            'path and rule count) or "fallback" (the last two labels: the file could not be '
            "read).",
        ).add(1, {"source": st.source, "path": st.path, "rules": str(st.entries)})
        return [dom, cli, sus, kids, ratio, info]


def client_text(raw: str) -> str:
    b = raw.encode("latin-1")
    if len(b) == 4:
        return socket.inet_ntop(socket.AF_INET, b)
    if len(b) == 16:
        return socket.inet_ntop(socket.AF_INET6, b)
    return "unknown"
