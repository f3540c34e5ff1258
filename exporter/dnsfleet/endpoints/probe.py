"""The ``/probe`` rules: which target, which module, which query, how many at once.

As blackbox_exporter keeps them in ``prober/handler.go``, the rules live here and not in the
HTTP layer: a request's parameters go in, a probe result or a refusal comes out, and
``endpoints/router.py`` only maps a refusal's kind to a status code. The handler sees the exporter
through :class:`ProbeService` (the configuration, the budget, the cap and one probe), so it
depends only on layers below ``app`` (docs/design.md, Code layout).

- ``target`` is an IP literal (never a name to resolve: the exporter would probe whatever
  the name resolves to today), optionally with a port and an IPv6 zone.
- An IPv4-mapped IPv6 address is judged as the IPv4 host it reaches.
- The target must be configured or inside ``probe_allowlist``.
- ``module`` defaults to the configured target's module; it must exist.
- ``name``/``type`` override the query only for a module with ``allow_query_override``.
- At most ``limits.max_concurrent_probes`` probes are in flight (fewer if the open-file
  limit is low): each holds a socket.

The common request (a configured or allowed target, a plain UDP module, no override, room
under the cap) is served by callbacks (:meth:`ProbeHandler.start`): the query goes out from
the request's own callback through probes/udpshared.py's sockets and the answer is judged
and handed back from the socket's, with no task or future between (a task's steps and the
loop's turns for them were the larger part of a /probe's CPU). Everything else, and any
request the fast path is unsure of, takes the general path (:meth:`ProbeHandler.handle`),
which gives every refusal.
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import socket
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

import dns.exception

from dnsfleet.config import Config, Module, Target, parse_address
from dnsfleet.dnswire import Query
from dnsfleet.probes import Exchange, ProbeResult, judge, query_for, udpshared
from dnsfleet.probes.sharedsock import Sockaddr, shareable


class ProbeService(Protocol):
    """What the /probe rules need of the exporter (``app.Exporter`` provides it)."""

    @property
    def config(self) -> Config: ...

    def scrape_budget(self, header_timeout: float | None) -> float: ...

    def max_concurrent_probes(self, cfg: Config | None = None) -> int: ...

    async def probe_one(
        self,
        target: Target,
        module: Module,
        timeout: float,
        *,
        qname: str | None = None,
        qtype: str | None = None,
    ) -> ProbeResult: ...

    def probe_failed(self, target: Target, e: Exception, duration: float) -> ProbeResult:
        """The target's ``internal`` failure for an exception of ours, counted and logged
        as probe_one's barrier does."""
        ...


class Refusal(enum.Enum):
    """Why a /probe request was not probed; the HTTP layer maps each to a status code."""

    INVALID = "invalid"  # malformed or missing parameters
    FORBIDDEN = "forbidden"  # a target or override the configuration does not allow
    BUSY = "busy"  # the concurrency cap is reached


@dataclass(frozen=True, slots=True)
class Refused:
    kind: Refusal
    reason: str


# Parsed /probe targets kept, so a target asked for again is not parsed again (ipaddress
# parsing was a tenth of a /probe's CPU). Least recently used first out when full, so it
# stays bounded whatever clients send. Prometheus asks for each target once per interval,
# round the whole list: a shard larger than this would miss on every request, so it holds
# a 10,000-target shard with room (about 470 bytes per target, both caches: ~7.7 MB full).
ADDRESS_CACHE_SIZE = 16384

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Parsed = tuple[str, int, int, IPAddress]
EndpointKey = tuple[str, int, int]
Ready = tuple[Target, Module]
# A Ready the callback path can serve, with its query, sockaddr and address family.
Fast = tuple[Target, Module, Query, Sockaddr, socket.AddressFamily]


class ProbeHandler:
    """Applies the /probe rules and runs the probe; keeps the count of probes in flight."""

    def __init__(self, exp: ProbeService) -> None:
        self.exp = exp
        self.in_flight = 0
        # OrderedDict: moving a hit to the end and dropping the oldest are both O(1).
        self._parsed: OrderedDict[str, Parsed] = OrderedDict()
        self._index_of: Config | None = None
        self._index: dict[EndpointKey, list[Target]] = {}
        # What a request's (target, module) resolved to, past every check but the query
        # override's and the cap's, for the configuration the index was built from: a
        # target asked for again skips parsing, the index, the module and the allowlist
        # (ipaddress's ``in`` is Python code, a microsecond per network). Least recently
        # used first out, as _parsed.
        self._ready: OrderedDict[tuple[str, str], Ready] = OrderedDict()
        # The same for the callback path (start): None where it cannot serve the pair.
        self._fast: OrderedDict[tuple[str, str], Fast | None] = OrderedDict()
        # The loop the callback path last ran on: asyncio.get_running_loop() makes a
        # getpid(2) call each time, a system call per request.
        self._loop: asyncio.AbstractEventLoop | None = None

    def _parse(self, raw_target: str) -> Parsed:
        """``parse_address`` and the address it reaches; ValueError for a bad target."""
        parsed = self._parsed.get(raw_target)
        if parsed is not None:
            self._parsed.move_to_end(raw_target)
        else:
            host, port, scope = parse_address(raw_target)
            ip = ipaddress.ip_address(host)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                # ::ffff:a.b.c.d reaches the IPv4 host: judge it as that host, so an IPv6
                # entry in the allowlist cannot open the IPv4 space (or a v4 target hide
                # behind v6).
                ip = ip.ipv4_mapped
                host, scope = str(ip), 0
            if len(self._parsed) >= ADDRESS_CACHE_SIZE:
                self._parsed.popitem(last=False)
            parsed = self._parsed[raw_target] = (host, port, scope, ip)
        return parsed

    def _configured(self, cfg: Config, key: EndpointKey) -> list[Target]:
        if self._index_of is not cfg:
            index: dict[EndpointKey, list[Target]] = {}
            for t in cfg.targets:
                index.setdefault((t.host, t.port, t.scope_id), []).append(t)
            self._index, self._index_of = index, cfg
            self._ready.clear()
            self._fast.clear()
        return self._index.get(key, [])

    @staticmethod
    def _target(raw: str, key: EndpointKey, module: str, configured: list[Target]) -> Target:
        for t in configured:
            if t.module == module:
                return t
        host, port, scope = key
        return Target(address=raw, host=host, port=port, module=module, scope_id=scope)

    def _resolve(self, cfg: Config, raw_target: str, module_asked: str) -> Ready | Refused:
        """The target and module a request names, or why it may not be probed."""
        if not raw_target:
            return Refused(Refusal.INVALID, "missing parameter: target")
        try:
            host, port, scope, ip = self._parse(raw_target)
        except ValueError as e:
            return Refused(Refusal.INVALID, f"invalid target: {e}")
        configured = self._configured(cfg, (host, port, scope))
        module_name = module_asked or (configured[0].module if configured else "")
        if not module_name:
            return Refused(Refusal.INVALID, "missing parameter: module")
        module = cfg.modules.get(module_name)
        if module is None:
            return Refused(Refusal.INVALID, f"unknown module {module_name!r}")
        if not configured and not any(ip in net for net in cfg.probe_allowlist):
            return Refused(
                Refusal.FORBIDDEN,
                f"target {raw_target} is neither configured nor inside probe_allowlist",
            )
        return self._target(raw_target, (host, port, scope), module_name, configured), module

    def start(
        self,
        params: Mapping[str, str],
        header_timeout: float | None,
        respond: Callable[[ProbeResult], None],
    ) -> FastProbe | None:
        """Start the common /probe by callbacks: ``respond(result)`` is called once, from a
        later callback of the loop, unless the probe returned is cancelled first. None,
        having started nothing, for any request :meth:`handle` must answer (a refusal, an
        override, another transport, a target a shared socket cannot serve, a full cap)."""
        if "name" in params or "type" in params:
            return None
        exp = self.exp
        cfg = exp.config
        asked = (params.get("target", ""), params.get("module", ""))
        if self._index_of is cfg and asked in self._fast:
            self._fast.move_to_end(asked)
            fast = self._fast[asked]
        else:
            fast = self._fast_for(cfg, asked)
        if fast is None or self.in_flight >= exp.max_concurrent_probes(cfg):
            return None
        target, module, query, sockaddr, family = fast
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        probe = FastProbe(self, target, module, respond)
        pending = udpshared.start(
            loop,
            sockaddr=sockaddr,
            family=family,
            query=query,
            timeout=min(module.timeout, exp.scrape_budget(header_timeout)),
            done=probe.done,
        )
        if pending is None:
            return None
        self.in_flight += 1
        probe.pending = pending
        return probe

    def _fast_for(self, cfg: Config, asked: tuple[str, str]) -> Fast | None:
        resolved = self._resolve(cfg, *asked)
        fast = None
        if not isinstance(resolved, Refused):
            target, module = resolved
            sockaddr, family = target.sockaddr, target.family
            if module.transport == "udp" and shareable(sockaddr, family):
                fast = (target, module, query_for(module), sockaddr, family)
        if len(self._fast) >= ADDRESS_CACHE_SIZE:
            self._fast.popitem(last=False)
        self._fast[asked] = fast
        return fast

    async def handle(
        self,
        params: Mapping[str, str],
        *,
        repeated: Collection[str] = (),
        header_timeout: float | None = None,
    ) -> ProbeResult | Refused:
        exp = self.exp
        cfg = exp.config
        if repeated:
            # Two targets in one URL: a proxy and the exporter might each honour another.
            names = ", ".join(sorted(repeated))
            return Refused(Refusal.INVALID, f"repeated parameter: {names}")
        raw_target = params.get("target", "")
        asked = (raw_target, params.get("module", ""))
        ready = self._ready.get(asked) if self._index_of is cfg else None
        if ready is not None:
            self._ready.move_to_end(asked)
        else:
            resolved = self._resolve(cfg, raw_target, asked[1])
            if isinstance(resolved, Refused):
                return resolved
            if len(self._ready) >= ADDRESS_CACHE_SIZE:
                self._ready.popitem(last=False)
            ready = self._ready[asked] = resolved
        target, module = ready
        qname, qtype = params.get("name"), params.get("type")
        if (qname or qtype) and not module.allow_query_override:
            return Refused(
                Refusal.FORBIDDEN, f"module {module.name!r} does not allow overriding the query"
            )
        budget = exp.scrape_budget(header_timeout)
        cap = exp.max_concurrent_probes(cfg)
        if self.in_flight >= cap:
            # Each /probe holds a socket: a flood must not exhaust descriptors.
            return Refused(
                Refusal.BUSY,
                f"too many concurrent probes ({cap}: limits.max_concurrent_probes "
                f"{cfg.limits.max_concurrent_probes}, within the open-file limit)",
            )
        self.in_flight += 1
        try:
            return await exp.probe_one(
                target, module, budget, qname=qname, qtype=qtype.upper() if qtype else None
            )
        except (ValueError, dns.exception.DNSException) as e:  # invalid override name/type
            return Refused(Refusal.INVALID, f"invalid query: {e}")
        finally:
            self.in_flight -= 1


class FastProbe:
    """One /probe on the callback path (:meth:`ProbeHandler.start`): judged as
    ``probes.probe`` judges, behind the same barrier as ``probe_one``."""

    __slots__ = ("handler", "module", "pending", "respond", "target")

    def __init__(
        self,
        handler: ProbeHandler,
        target: Target,
        module: Module,
        respond: Callable[[ProbeResult], None],
    ) -> None:
        self.handler = handler
        self.target = target
        self.module = module
        self.respond = respond
        self.pending: udpshared.Pending | None = None

    def done(self, ex: Exchange) -> None:
        self.pending = None
        handler = self.handler
        handler.in_flight -= 1
        try:
            result = judge(ex, self.module)
        except Exception as e:
            result = handler.exp.probe_failed(self.target, e, ex.duration)
        self.respond(result)

    def cancel(self) -> None:
        """The client is gone: the query ends unanswered and frees its place under the cap."""
        pending, self.pending = self.pending, None
        if pending is not None:
            self.handler.in_flight -= 1
            pending.cancel()
