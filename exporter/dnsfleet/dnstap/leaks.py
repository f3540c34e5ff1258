"""Search-list expansions and cluster-domain leaks, read from dnstap.

What it is for: in Kubernetes a pod's resolv.conf has ``ndots:5`` and the search list
``<ns>.svc.<cluster>``, ``svc.<cluster>``, ``<cluster>`` (and the node's own search
domains), so a lookup of an external name with fewer than five dots is first tried with each
suffix appended, and each of those tries is a query that ends NXDOMAIN before the name
itself is asked. And a name under the cluster domain must be answered by the cluster DNS
itself: one that the resolver sends on (a missing ``kubernetes`` zone, a stub-domain
mistake) leaks the cluster's names and waits on a server that cannot know them.

The rule for an expansion (:meth:`Classifier.expansion`), a heuristic on the question name
of a CLIENT_RESPONSE answered NXDOMAIN, in lower case. Take the longest of these suffixes
the name ends with (at a label boundary, the name longer than it):

- ``svc.<cluster>``: the label before it is a namespace; the name is an expansion when
  what comes before the namespace has two labels or more
  (``www.example.com.default.svc.cluster.local``, ``www.example.com.svc.cluster.local``);
- ``<cluster>`` (under neither ``svc`` nor ``pod``): an expansion when what comes before it
  has two labels or more (``www.example.com.cluster.local``);
- a configured search suffix (``search_suffixes``): the same, two labels or more before it.

It catches an external name (or another namespace's ``svc.ns``) with a suffix appended and
answered NXDOMAIN. It misses a one-dot name under ``svc.<cluster>``
(``example.com.svc.cluster.local`` reads as service ``example`` in namespace ``com``),
single-label names (``db.default.svc.cluster.local``: a service lookup, even a failed
one), suffixes not configured, another cluster domain, and tries not answered NXDOMAIN (a
wildcard, a SERVFAIL). It counts, wrongly, a missing StatefulSet pod or SRV name
(``web-3.nginx.default.svc.cluster.local``, ``_http._tcp.web.default.svc.cluster.local``)
answered NXDOMAIN: names of that shape are the cluster's own.

A leak (:meth:`Classifier.in_cluster`): a RESOLVER_QUERY or FORWARDER_QUERY (a query the
resolver sent, not one it received) whose question is the cluster domain or a name under it.

Counts per target are exact; per client, the top ``top_n`` clients by expansions in the last
complete minute (the windowed Space-Saving table of :mod:`insight`, at most
:data:`insight.MAX_ANALYSED` targets), beside ``dnsfleet_dnstap_top_client_responses`` of
the same window for their share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from dnsfleet.dnstap.insight import MAX_ANALYSED, MAX_TOP_N, Windowed, client_text
from dnsfleet.dnstap.message import MESSAGE_TYPE_NAMES, peek
from dnsfleet.dnswire import encode_name
from dnsfleet.exposition import Family

RESOLVER_QUERY = MESSAGE_TYPE_NAMES.index("RESOLVER_QUERY") + 1
FORWARDER_QUERY = MESSAGE_TYPE_NAMES.index("FORWARDER_QUERY") + 1
OUTGOING = (RESOLVER_QUERY, FORWARDER_QUERY)
# The messages_total types that say a target logs what the counts are taken from: its
# counters are shown from 0 once it does, so an alert sees the first count as an increase.
ANSWERED_TYPES = ("client_response",)
OUTGOING_TYPES = ("resolver_query", "forwarder_query")

_SVC, _CLUSTER, _SEARCH = 0, 1, 2  # how a suffix reads the labels before it


def labels_of(wire: bytes) -> tuple[bytes, ...]:
    """An uncompressed wire name's labels, root excluded (as they are: lower it first)."""
    out: list[bytes] = []
    i, n = 0, len(wire)
    while i < n and wire[i]:
        ln = wire[i]
        out.append(wire[i + 1 : i + 1 + ln])
        i += ln + 1
    return tuple(out)


def _wire(labels: tuple[bytes, ...]) -> bytes:
    return b"".join(bytes((len(x),)) + x for x in labels) + b"\x00"


class Classifier:
    """The expansion and leak rules for one cluster domain and its extra search suffixes
    (presentation form, a trailing dot or not, any case)."""

    __slots__ = ("_cluster_wire", "_rules", "_tails")

    def __init__(self, cluster_domain: str, search_suffixes: Iterable[str] = ()) -> None:
        cluster = labels_of(encode_name(cluster_domain.lower()))
        if not cluster:
            raise ValueError("the cluster domain cannot be the root")
        rules: dict[tuple[bytes, ...], int] = {(b"svc", *cluster): _SVC, cluster: _CLUSTER}
        for s in search_suffixes:
            labels = labels_of(encode_name(s.lower()))
            if not labels:
                raise ValueError("a search suffix cannot be the root")
            rules.setdefault(labels, _SEARCH)
        # Longest first: a name is read by the longest suffix it ends with.
        ranked = sorted(rules.items(), key=lambda r: -len(r[0]))
        self._rules = tuple((_wire(labels), kind) for labels, kind in ranked)
        self._tails = tuple(tail for tail, _ in self._rules)
        self._cluster_wire = _wire(cluster)

    def expansion(self, qname: bytes) -> bool:
        """Whether a question name (uncompressed wire form) answered NXDOMAIN reads as a
        search-list expansion of a name with a dot in it (the module's rule)."""
        wire = qname.lower()
        if not wire.endswith(self._tails):  # one C call: most names end elsewhere
            return False
        for tail, kind in self._rules:
            if not wire.endswith(tail):
                continue
            # Walk the labels before the suffix: it must start where a label does.
            end = len(wire) - len(tail)
            i = last = count = 0
            while i < end:
                last = i
                i += wire[i] + 1
                count += 1
            if i != end or count == 0:
                continue
            if kind == _SVC:
                return count >= 3  # two labels or more, then the namespace
            if kind == _CLUSTER and wire[last + 1 : end] in (b"svc", b"pod"):
                return False
            return count >= 2
        return False

    def in_cluster(self, qname: bytes) -> bool:
        """Whether a question name (uncompressed wire form) is the cluster domain or under
        it."""
        wire = qname.lower()
        if not wire.endswith(self._cluster_wire):
            return False
        end = len(wire) - len(self._cluster_wire)
        i = 0
        while i < end:
            i += wire[i] + 1
        return i == end

    def leaked(self, query: bytes) -> bool:
        """Whether an outgoing query's question is under the cluster domain; a message
        whose question does not parse raises :class:`~dnsfleet.dnstap.message.Undecodable`.
        """
        if self._cluster_wire not in query.lower():  # the question is never compressed
            return False
        return self.in_cluster(peek(query, with_ede=False).qname)


class Leaks:
    """Counts expansions answered NXDOMAIN and cluster names sent upstream, per target;
    the expansions per client for the top ``top_n`` clients of the last complete minute."""

    def __init__(self, classifier: Classifier, top_n: int) -> None:
        self.classifier = classifier
        self.top_n = min(max(top_n, 0), MAX_TOP_N)
        self.expansions: dict[str, int] = {}
        self.forwarded: dict[str, int] = {}
        self.clients: dict[str, Windowed] = {}

    def nxdomain(self, target: str, client: bytes, qname: bytes, now: float) -> None:
        """One CLIENT_RESPONSE answered NXDOMAIN to ``client`` (its 4 or 16 bytes)."""
        if not self.classifier.expansion(qname):
            return
        self.expansions[target] = self.expansions.get(target, 0) + 1
        if not self.top_n:
            return
        w = self.clients.get(target)
        if w is None:
            if len(self.clients) >= MAX_ANALYSED:
                return
            w = self.clients[target] = Windowed(max(4 * self.top_n, 64), now)
        w.roll(now, self.top_n)
        w.current.add(client.decode("latin-1"))

    def outgoing(self, target: str, query: bytes) -> None:
        """One RESOLVER_QUERY or FORWARDER_QUERY's DNS message."""
        if self.classifier.leaked(query):
            self.forwarded[target] = self.forwarded.get(target, 0) + 1

    def families(
        self,
        labels: Callable[[str], dict[str, str]],
        messages: Mapping[tuple[str, str], int],
        now: float,
    ) -> list[Family]:
        """``messages``: the aggregator's (target, message type) counts, which say which
        targets log client responses and outgoing queries (their counters start at 0)."""
        answered = {t for t, kind in messages if kind in ANSWERED_TYPES}
        sending = {t for t, kind in messages if kind in OUTGOING_TYPES}
        exp = Family(
            "dnsfleet_dnstap_search_expansion_nxdomain_total",
            "Client queries answered NXDOMAIN whose name reads as a search-list expansion "
            "of a name with a dot (an external name with a cluster or search suffix "
            "appended): queries a lower ndots would not have sent.",
            "counter",
        )
        for t in sorted(answered | set(self.expansions)):
            exp.add(self.expansions.get(t, 0), labels(t))
        fwd = Family(
            "dnsfleet_dnstap_cluster_domain_forwarded_total",
            "Queries the resolver sent on (RESOLVER_QUERY, FORWARDER_QUERY) for names under "
            "the cluster domain, which only the cluster DNS can answer.",
            "counter",
        )
        for t in sorted(sending | set(self.forwarded)):
            fwd.add(self.forwarded.get(t, 0), labels(t))
        top = Family(
            "dnsfleet_dnstap_top_client_search_expansion_nxdomain",
            "Search-list expansions answered NXDOMAIN in the last complete minute to the "
            "client addresses with the most, top_n per target.",
        )
        for t, w in self.clients.items():
            w.roll(now, self.top_n)
            for client, n in w.shown:
                top.add(n, {**labels(t), "client": client_text(client)})
        return [exp, fwd, top]
