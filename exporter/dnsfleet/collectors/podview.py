"""The pod view: each configured name looked up as the pod's libc would, from the pod's own
resolv.conf (read through --path.rootfs), against the nameservers it names; what the
application waited and what it cost the cluster DNS (dnsfleet.podview).

Every lookup of every configured pod runs concurrently; each is followed for at most its
``budget`` and never past the scrape deadline, and one cut short says so
(``dnsfleet_podview_lookup_cut_short``) rather than pass for the pod's own timeout. A
missing pod resolv.conf (a pod gone) is ``dnsfleet_podview_resolv_conf_readable`` 0, never
a failed scrape.
"""

from __future__ import annotations

import asyncio
import socket

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.config import PodView, parse_address
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.resolvconf import NAMESERVER_PORT, Nameserver, ResolvConf, parse_resolv_conf
from dnsfleet.podview.driver import Lookup, Server, lookup
from dnsfleet.podview.walk import FAILURES, Libc, Outcome

# glibc and musl query 127.0.0.1 when resolv.conf names no usable nameserver.
IMPLICIT = Nameserver(address="127.0.0.1", version=4)
MIN_BUDGET = 0.05


def server_of(ns: Nameserver) -> Server:
    if ns.version == 4:
        return Server(ns.text, (ns.address, NAMESERVER_PORT), socket.AF_INET)
    try:
        _, _, scope_id = parse_address(ns.text)
    except ValueError:
        scope_id = 0
    return Server(ns.text, (ns.address, NAMESERVER_PORT, 0, scope_id), socket.AF_INET6)


def read_pod(fs: HostFS, view: PodView) -> ResolvConf | None:
    try:
        return parse_resolv_conf(fs.read_text(fs.root(view.resolv_conf), limit=1024 * 1024))
    except (HostReadError, OSError):
        return None


async def look(
    fs: HostFS, views: tuple[PodView, ...], *, deadline: float
) -> list[tuple[PodView, list[Lookup] | None]]:
    loop = asyncio.get_running_loop()
    confs = await asyncio.to_thread(lambda: [read_pod(fs, v) for v in views])
    jobs: list[tuple[PodView, list[asyncio.Task[Lookup]] | None]] = []
    for view, conf in zip(views, confs, strict=True):
        if conf is None:
            jobs.append((view, None))
            continue
        servers = tuple(server_of(ns) for ns in conf.servers or (IMPLICIT,))
        budget = max(min(view.budget, deadline - loop.time() - DEADLINE_MARGIN), MIN_BUDGET)
        tasks = [
            asyncio.ensure_future(lookup(conf, name, Libc(view.libc), servers, budget=budget))
            for name in view.names
        ]
        jobs.append((view, tasks))
    every = [t for _, tasks in jobs for t in tasks or ()]
    if every:
        await asyncio.gather(*every)
    return [(view, None if tasks is None else [t.result() for t in tasks]) for view, tasks in jobs]


# The pod-view families, in exposition order: key -> (name, help).
_PODVIEW: dict[str, tuple[str, str]] = {
    "readable": (
        "dnsfleet_podview_resolv_conf_readable",
        "1 if the pod's resolv.conf could be read.",
    ),
    "duration": (
        "dnsfleet_podview_lookup_duration_seconds",
        "Seconds the application waited for the lookup, walking the search list as its libc does.",
    ),
    "success": (
        "dnsfleet_podview_lookup_success",
        "1 if the lookup gave the application an address.",
    ),
    "failure": (
        "dnsfleet_podview_lookup_failure",
        "What the application was told when the lookup failed: 1 for the reason, 0 for the "
        "others (all 0 on success).",
    ),
    "queries": (
        "dnsfleet_podview_queries_per_lookup",
        "DNS queries the lookup sent (UDP datagrams and TCP queries): the search-list "
        "amplification.",
    ),
    "answer": (
        "dnsfleet_podview_answer_info",
        "Where the answer came from: the search domain appended (empty for the name as written) "
        "and the nameserver that answered.",
    ),
    "cut_short": (
        "dnsfleet_podview_lookup_cut_short",
        "1 if the scrape deadline or the budget ended the lookup before the libc would have.",
    ),
}


def families(results: list[tuple[PodView, list[Lookup] | None]]) -> list[Family]:
    fams = {key: Family(name, help_) for key, (name, help_) in _PODVIEW.items()}
    for view, lookups in results:
        f = {"resolv_conf": view.resolv_conf, "libc": view.libc}
        fams["readable"].add(0.0 if lookups is None else 1.0, f)
        for r in lookups or ():
            labels = {**f, "name": r.name}
            fams["duration"].add(r.duration, labels)
            fams["success"].add(1.0 if r.outcome is Outcome.ANSWER else 0.0, labels)
            for reason in FAILURES:
                fams["failure"].add(
                    1.0 if r.outcome is reason else 0.0, {**labels, "reason": reason.value}
                )
            fams["queries"].add(r.queries, labels)
            fams["cut_short"].add(1.0 if r.cut_short else 0.0, labels)
            if r.suffix is not None:
                fams["answer"].add(1.0, {**labels, "suffix": r.suffix, "nameserver": r.nameserver})
    return list(fams.values())


async def collect(ctx: CollectContext) -> list[Family]:
    return families(await look(ctx.fs, ctx.config.pod_view, deadline=ctx.deadline))


COLLECTOR = Collector(name="podview", run=collect, enabled=lambda cfg: bool(cfg.pod_view))
