"""A documented double of a Consul agent's DNS interface and the HTTP endpoints dnsfleet uses.

No Consul binary can be installed on the test machines, so this double implements what
Consul's documentation says, and nothing it does not. Every behaviour cites its source:

- [DNS]     Consul DNS static lookups
            https://developer.hashicorp.com/consul/docs/discover/service/static
            (older: https://developer.hashicorp.com/consul/docs/v1.13.x/discovery/dns)
- [DNSREF]  Consul DNS reference https://developer.hashicorp.com/consul/docs/reference/dns
- [DNSCFG]  dns_config parameters
            https://developer.hashicorp.com/consul/docs/reference/agent/configuration-file/dns
- [CACHE]   DNS caching https://developer.hashicorp.com/consul/docs/services/discovery/dns-cache
- [HEALTH]  Health HTTP API https://developer.hashicorp.com/consul/api-docs/health
- [QUERY]   Prepared Query HTTP API https://developer.hashicorp.com/consul/api-docs/query
- [STATUS]  Status HTTP API https://developer.hashicorp.com/consul/api-docs/status
- [AGENT]   Agent HTTP API https://developer.hashicorp.com/consul/api-docs/agent
- [ACL]     HTTP API filtering by ACLs (X-Consul-Results-Filtered-By-ACLs), same pages.
- [DIG]     dig output recorded from a real agent (consul 0.6, mirrored by later versions):
            https://gist.github.com/slackpad/8e1ef5a5141fdbd3ec60 (NXDOMAIN + consul SOA,
            flags "qr aa rd") and https://gist.github.com/c4milo/5e4ac54a356ef8f04c5d (SRV
            with the node's A in ADDITIONAL).

A fault switch, ``serve_failed``, makes DNS keep answering instances whose checks are
critical, as a stale or broken agent would: the catalog and DNS then disagree.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from aiohttp import web

from tests.harness.servers import ScriptedServer
from tests.harness.tools import free_port

DOMAIN = dns.name.from_text("consul.")
KINDS = ("service", "node", "query", "addr")
PASSING, WARNING, CRITICAL = "passing", "warning", "critical"
# [DNSCFG] udp_answer_limit: default 3, applied to UDP questions without EDNS (512 bytes).
UDP_ANSWER_LIMIT = 3
DEFAULT_UDP_SIZE = 512


@dataclass
class Node:
    name: str
    address: str
    datacenter: str = "dc1"


@dataclass
class Instance:
    id: str
    service: str
    node: str
    port: int
    tags: tuple[str, ...] = ()
    address: str = ""  # service address; "" -> node address [HEALTH]
    checks: dict[str, str] = field(default_factory=dict)

    def statuses(self) -> list[str]:
        return list(self.checks.values())


@dataclass
class PreparedQuery:
    id: str
    name: str
    service: str
    tags: tuple[str, ...] = ()
    only_passing: bool = False
    failover_datacenters: tuple[str, ...] = ()


class ConsulDouble:
    """One agent's view: nodes in several datacenters, service instances with checks,
    prepared queries, Raft status. DNS (UDP+TCP) and HTTP on free loopback ports."""

    def __init__(
        self,
        *,
        datacenter: str = "dc1",
        token: str | None = None,
        only_passing: bool = False,
        version: str = "1.20.1",
        enable_truncate: bool = False,
    ) -> None:
        self.datacenter = datacenter
        self.token = token
        self.only_passing = only_passing
        self.enable_truncate = enable_truncate
        self.version = version
        self.nodes: dict[tuple[str, str], Node] = {}
        self.instances: dict[str, Instance] = {}
        self.queries: dict[str, PreparedQuery] = {}
        self.leader = "127.0.0.1:8300"
        self.peers = ["127.0.0.1:8300", "127.0.0.2:8300", "127.0.0.3:8300"]
        self.serve_failed = False  # fault switch, see module docstring
        self.lock = threading.RLock()
        self.dns_queries = 0
        self.dns_port = free_port()
        self.http_port = free_port(socket.SOCK_STREAM)
        self._dns: ScriptedServer | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._http_thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ catalog

    def add_node(self, name: str, address: str, datacenter: str | None = None) -> None:
        with self.lock:
            dc = datacenter or self.datacenter
            self.nodes[(dc, name)] = Node(name, address, dc)

    def register(
        self,
        service: str,
        node: str,
        port: int,
        *,
        tags: tuple[str, ...] = (),
        address: str = "",
        status: str = PASSING,
        datacenter: str | None = None,
        instance_id: str | None = None,
    ) -> str:
        dc = datacenter or self.datacenter
        with self.lock:
            if (dc, node) not in self.nodes:
                raise KeyError(f"node {node} not in {dc}")
            iid = instance_id or f"{service}-{node}-{port}"
            self.instances[iid] = Instance(
                id=iid,
                service=service,
                node=f"{dc}/{node}",
                port=port,
                tags=tags,
                address=address,
                # Every node carries the agent's serfHealth check; instances their own.
                checks={"serfHealth": PASSING, f"service:{iid}": status},
            )
            return iid

    def set_status(self, instance_id: str, status: str, check: str | None = None) -> None:
        with self.lock:
            inst = self.instances[instance_id]
            inst.checks[check or f"service:{instance_id}"] = status

    def deregister(self, instance_id: str) -> None:
        with self.lock:
            del self.instances[instance_id]

    def create_query(
        self,
        name: str,
        service: str,
        *,
        tags: tuple[str, ...] = (),
        only_passing: bool = False,
        failover_datacenters: tuple[str, ...] = (),
    ) -> str:
        with self.lock:
            qid = str(uuid.uuid4())
            self.queries[qid] = PreparedQuery(
                qid, name, service, tags, only_passing, failover_datacenters
            )
            return qid

    def _node(self, inst: Instance) -> Node:
        dc, name = inst.node.split("/", 1)
        return self.nodes[(dc, name)]

    def _addr(self, inst: Instance) -> str:
        # [HEALTH] Service.Address is empty when the instance uses its node's address;
        # [DNS] answers then carry the node's address.
        return inst.address or self._node(inst).address

    @staticmethod
    def _tags_match(inst: Instance, tags: tuple[str, ...]) -> bool:
        # [QUERY] Service.Tags: every tag must be present; "!tag" must be absent.
        for t in tags:
            if t.startswith("!"):
                if t[1:] in inst.tags:
                    return False
            elif t not in inst.tags:
                return False
        return True

    def _select(
        self,
        service: str,
        dc: str,
        *,
        tag: str | None = None,
        dns_filter: bool,
        only_passing: bool | None = None,
    ) -> list[Instance]:
        only = self.only_passing if only_passing is None else only_passing
        out = []
        for inst in self.instances.values():
            if inst.service != service or self._node(inst).datacenter != dc:
                continue
            if tag is not None and tag not in inst.tags:
                continue
            st = inst.statuses()
            # [DNS] "nodes that ... have no failing health checks"; [DNSCFG] only_passing
            # (default false): when false only critical is excluded, warning instances
            # are still answered.
            unhealthy = CRITICAL in st or (only and any(s != PASSING for s in st))
            if dns_filter and unhealthy and not self.serve_failed:
                continue
            out.append(inst)
        return out

    def execute_query(self, key: str) -> tuple[PreparedQuery, str, list[Instance], int] | None:
        """[QUERY] Execute by ID or name; when the local datacenter has no healthy
        instance, Failover.Datacenters are tried in order. (query, dc, instances, failovers)"""
        with self.lock:
            q = self.queries.get(key) or next(
                (q for q in self.queries.values() if q.name == key), None
            )
            if q is None:
                return None
            failovers = 0
            for dc in (self.datacenter, *q.failover_datacenters):
                found = [
                    i
                    for i in self._select(
                        q.service, dc, dns_filter=True, only_passing=q.only_passing
                    )
                    if self._tags_match(i, q.tags)
                ]
                if found:
                    return q, dc, found, failovers
                failovers += 1
            return q, self.datacenter, [], failovers

    # ------------------------------------------------------------------ DNS

    def _soa(self) -> dns.rrset.RRset:
        # [DIG] "consul. 0 IN SOA ns.consul. postmaster.consul. <serial> 3600 600 86400 0"
        return dns.rrset.from_text(
            DOMAIN,
            0,
            "IN",
            "SOA",
            f"ns.consul. postmaster.consul. {int(time.time())} 3600 600 86400 0",
        )

    def respond(self, wire: bytes, *, tcp: bool) -> bytes | None:
        try:
            q = dns.message.from_wire(wire)
        except Exception:
            return None
        self.dns_queries += 1
        r = dns.message.make_response(q)
        # [DIG] flags "qr aa rd": authoritative, RD echoed, RA clear (no recursors).
        r.flags |= dns.flags.AA
        r.flags &= ~dns.flags.RA
        if not q.question:
            r.set_rcode(dns.rcode.FORMERR)
            return r.to_wire()
        question = q.question[0]
        with self.lock:
            self._answer(question.name, question.rdtype, r)
        return self._fit(q, r, tcp=tcp)

    def _nx(self, r: dns.message.Message) -> None:
        # [DIG] unknown names and services without healthy instances: NXDOMAIN + SOA.
        r.set_rcode(dns.rcode.NXDOMAIN)
        r.authority.append(self._soa())

    def _answer(self, qname: dns.name.Name, qtype: int, r: dns.message.Message) -> None:
        if not qname.is_subdomain(DOMAIN):
            # Not documented for an agent without recursors; dnsfleet never asks outside
            # consul., so the double refuses rather than guess.
            r.set_rcode(dns.rcode.REFUSED)
            return
        labels = [lb.decode().lower() for lb in qname.relativize(DOMAIN).labels]
        dc = self.datacenter
        # [DNSREF] "<datacenter>.dc" or the bare datacenter after the kind.
        if len(labels) >= 3 and labels[-1] == "dc":
            dc, labels = labels[-2], labels[:-2]
        elif len(labels) >= 2 and labels[-1] not in KINDS and labels[-2] in KINDS:
            dc, labels = labels[-1], labels[:-1]
        if not labels or labels[-1] not in KINDS:
            self._nx(r)
            return
        kind, rest = labels[-1], labels[:-1]
        if kind == "node" and len(rest) == 1:
            self._node_answer(qname, qtype, rest[0], dc, r)
        elif kind == "addr" and len(rest) == 1:
            self._addr_answer(qname, qtype, rest[0], r)
        elif kind == "service" and rest:
            svc, tag = self._service_parts(rest)
            if svc is None:
                self._nx(r)
                return
            found = self._select(svc, dc, tag=tag, dns_filter=True)
            self._records(qname, qtype, found, r)
        elif kind == "query" and rest:
            name = rest[0][1:] if len(rest) == 2 and rest[0].startswith("_") else rest[0]
            res = self.execute_query(name)
            if res is None:
                self._nx(r)
                return
            self._records(qname, qtype, res[2], r)
        else:
            self._nx(r)

    @staticmethod
    def _service_parts(rest: list[str]) -> tuple[str | None, str | None]:
        # [DNS] RFC 2782 form "_<service>._<tag>.service.consul"; a "_tcp" tag means no
        # tag filter. Standard form "[<tag>.]<service>.service.consul".
        if len(rest) == 2 and rest[0].startswith("_") and rest[1].startswith("_"):
            tag = rest[1][1:]
            return rest[0][1:], (None if tag == "tcp" else tag)
        if len(rest) == 2:
            return rest[1], rest[0]
        if len(rest) == 1:
            return rest[0], None
        return None, None

    def _node_answer(
        self, qname: dns.name.Name, qtype: int, name: str, dc: str, r: dns.message.Message
    ) -> None:
        node = self.nodes.get((dc, name))
        if node is None:
            self._nx(r)
            return
        want = dns.rdatatype.AAAA if ":" in node.address else dns.rdatatype.A
        if qtype in (want, dns.rdatatype.ANY):
            r.answer.append(dns.rrset.from_text(qname, 0, "IN", want, node.address))
        else:
            r.authority.append(self._soa())  # NOERROR, no data: SOA for caching

    def _addr_answer(
        self, qname: dns.name.Name, qtype: int, hexaddr: str, r: dns.message.Message
    ) -> None:
        # [DNSREF] "<hex-ip>.addr.<dc>.consul": 8 hex digits are an IPv4 address, 32 an
        # IPv6 one; Consul uses this form as SRV target when a service has its own address.
        try:
            raw = bytes.fromhex(hexaddr)
            ip = ipaddress.ip_address(raw) if len(raw) in (4, 16) else None
        except ValueError:
            ip = None
        if ip is None:
            self._nx(r)
            return
        want = dns.rdatatype.A if ip.version == 4 else dns.rdatatype.AAAA
        if qtype in (want, dns.rdatatype.ANY):
            r.answer.append(dns.rrset.from_text(qname, 0, "IN", want, str(ip)))
        else:
            r.authority.append(self._soa())

    def _target(self, inst: Instance) -> tuple[str, str]:
        node = self._node(inst)
        addr = self._addr(inst)
        if inst.address and inst.address != node.address:
            hexip = ipaddress.ip_address(addr).packed.hex()
            return f"{hexip}.addr.{node.datacenter}.consul.", addr
        return f"{node.name}.node.{node.datacenter}.consul.", addr

    def _records(
        self, qname: dns.name.Name, qtype: int, found: list[Instance], r: dns.message.Message
    ) -> None:
        if not found:
            self._nx(r)
            return
        # [DNS] results are shuffled on every lookup to spread load.
        found = random.sample(found, len(found))
        # [CACHE] "By default, Consul serves all DNS results with a 0 TTL value".
        if qtype == dns.rdatatype.SRV:
            # [DNS] SRV "1 1 <port> <target>" (weights 1 by default), the target's address
            # in ADDITIONAL [DIG].
            for inst in found:
                target, addr = self._target(inst)
                r.answer.append(
                    dns.rrset.from_text(qname, 0, "IN", "SRV", f"1 1 {inst.port} {target}")
                )
                rtype = "AAAA" if ":" in addr else "A"
                r.additional.append(dns.rrset.from_text(target, 0, "IN", rtype, addr))
            return
        want = {dns.rdatatype.A: 4, dns.rdatatype.AAAA: 6, dns.rdatatype.ANY: 0}.get(
            dns.rdatatype.RdataType.make(qtype)
        )
        if want is None:
            r.authority.append(self._soa())
            return
        seen: set[str] = set()
        for inst in found:
            addr = self._addr(inst)
            version = ipaddress.ip_address(addr).version
            # One A per address: two instances on one node give one record.
            if addr in seen or (want and version != want):
                continue
            seen.add(addr)
            r.answer.append(
                dns.rrset.from_text(qname, 0, "IN", "A" if version == 4 else "AAAA", addr)
            )
        if not r.answer:
            r.authority.append(self._soa())

    def _fit(self, q: dns.message.Message, r: dns.message.Message, *, tcp: bool) -> bytes:
        if tcp:
            return r.to_wire(max_size=65535)
        # [DNS] "When the DNS query is performed using UDP, Consul will truncate the results
        # without setting the truncate bit" unless [DNSCFG] enable_truncate is set; the
        # limit is the requester's EDNS buffer, or 512 bytes and udp_answer_limit records.
        size = max(q.payload, DEFAULT_UDP_SIZE) if q.edns >= 0 else DEFAULT_UDP_SIZE
        trimmed = False
        if q.edns < 0 and sum(len(x) for x in r.answer) > UDP_ANSWER_LIMIT:
            self._trim(r, UDP_ANSWER_LIMIT)
            trimmed = True
        wire = r.to_wire(max_size=65535)
        while len(wire) > size and r.answer:
            self._trim(r, sum(len(x) for x in r.answer) - 1)
            trimmed = True
            wire = r.to_wire(max_size=65535)
        if trimmed and self.enable_truncate:
            r.flags |= dns.flags.TC
            wire = r.to_wire(max_size=65535)
        return wire

    @staticmethod
    def _trim(r: dns.message.Message, keep: int) -> None:
        kept = [(rs.name, rs.rdtype, rd) for rs in r.answer for rd in rs][:keep]
        answer: dict[tuple[dns.name.Name, int], dns.rrset.RRset] = {}
        for name, rdtype, rd in kept:
            rs = answer.setdefault((name, rdtype), dns.rrset.RRset(name, dns.rdataclass.IN, rdtype))
            rs.add(rd, ttl=0)
        targets = {rd.target for _, t, rd in kept if t == dns.rdatatype.SRV}
        r.answer = list(answer.values())
        r.additional = [rs for rs in r.additional if rs.name in targets]
        r.index = {}

    # ------------------------------------------------------------------ DNS server

    def start_dns(self) -> None:
        # The one DNS test server (harness/servers.py), on this double's port; over TCP
        # the answer may be larger (see _fit).
        self._dns = ScriptedServer(
            lambda wire: self._replies(wire, tcp=False),
            tcp_handler=lambda wire: self._replies(wire, tcp=True),
            port=self.dns_port,
        )

    def stop_dns(self) -> None:
        if self._dns is not None:
            self._dns.close()
            self._dns = None

    def _replies(self, wire: bytes, *, tcp: bool) -> list[bytes]:
        reply = self.respond(wire, tcp=tcp)
        return [] if reply is None else [reply]

    # ------------------------------------------------------------------ HTTP

    def _authorized(self, request: web.Request) -> bool:
        return self.token is None or request.headers.get("X-Consul-Token") == self.token

    def _filtered(self, request: web.Request, body: list[object]) -> web.Response:
        # [ACL] with default-deny ACLs a token without read rights gets the list with the
        # entries it may not see removed, and the header saying so - not an error.
        if self._authorized(request):
            return web.json_response(body)
        headers = {"X-Consul-Results-Filtered-By-ACLs": "true"} if body else {}
        return web.json_response([], headers=headers)

    def _entry(self, inst: Instance) -> dict[str, object]:
        node = self._node(inst)
        # [HEALTH] "List Service Instances for Service": Node, Service, Checks per entry.
        return {
            "Node": {
                "ID": str(uuid.uuid5(uuid.NAMESPACE_DNS, node.name)),
                "Node": node.name,
                "Address": node.address,
                "Datacenter": node.datacenter,
                "TaggedAddresses": {"lan": node.address, "wan": node.address},
                "Meta": {},
            },
            "Service": {
                "ID": inst.id,
                "Service": inst.service,
                "Tags": list(inst.tags),
                "Address": inst.address,
                "Port": inst.port,
                "Meta": {},
                "Weights": {"Passing": 1, "Warning": 1},
            },
            "Checks": [
                {
                    "Node": node.name,
                    "CheckID": cid,
                    "Name": cid,
                    "Status": st,
                    "ServiceID": "" if cid == "serfHealth" else inst.id,
                    "ServiceName": "" if cid == "serfHealth" else inst.service,
                }
                for cid, st in inst.checks.items()
            ],
        }

    async def _health_service(self, request: web.Request) -> web.Response:
        svc = request.match_info["service"]
        dc = request.query.get("dc", self.datacenter)
        tag = request.query.get("tag")
        with self.lock:
            found = self._select(svc, dc, tag=tag, dns_filter=False)
            if "passing" in request.query:
                # [HEALTH] passing: "only nodes with all checks in the passing state".
                found = [i for i in found if all(s == PASSING for s in i.statuses())]
            body: list[object] = [self._entry(i) for i in found]
        return self._filtered(request, body)

    async def _leader(self, request: web.Request) -> web.Response:
        # [STATUS] a JSON string "ip:port"; "" while the cluster has no leader.
        return web.json_response(self.leader)

    async def _peers(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.peers))  # [STATUS] list of "ip:port"

    async def _agent_self(self, request: web.Request) -> web.Response:
        # [AGENT] Read Configuration: needs agent:read, otherwise 403 "Permission denied".
        if not self._authorized(request):
            return web.Response(status=403, text="Permission denied")
        return web.json_response(
            {
                "Config": {
                    "Datacenter": self.datacenter,
                    "NodeName": "double",
                    "NodeID": str(uuid.uuid5(uuid.NAMESPACE_DNS, "double")),
                    "Server": True,
                    "Revision": "double",
                    "Version": self.version,
                },
                "DebugConfig": {
                    "DNSOnlyPassing": self.only_passing,
                    "DNSEnableTruncate": self.enable_truncate,
                },
                "Member": {"Name": "double", "Addr": "127.0.0.1", "Port": 8301},
                "Meta": {},
            }
        )

    def _query_json(self, q: PreparedQuery) -> dict[str, object]:
        return {
            "ID": q.id,
            "Name": q.name,
            "Session": "",
            "Token": "",
            "Service": {
                "Service": q.service,
                "Tags": list(q.tags),
                "OnlyPassing": q.only_passing,
                "Failover": {"NearestN": 0, "Datacenters": list(q.failover_datacenters)},
            },
            "DNS": {"TTL": ""},
        }

    async def _query_list(self, request: web.Request) -> web.Response:
        with self.lock:
            body: list[object] = [self._query_json(q) for q in self.queries.values()]
        return self._filtered(request, body)  # [QUERY] list needs query:read

    async def _query_create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.Response(status=403, text="Permission denied")
        d = await request.json()
        svc = d.get("Service", {})
        qid = self.create_query(
            d.get("Name", ""),
            svc["Service"],
            tags=tuple(svc.get("Tags", ())),
            only_passing=bool(svc.get("OnlyPassing", False)),
            failover_datacenters=tuple(svc.get("Failover", {}).get("Datacenters", ())),
        )
        return web.json_response({"ID": qid})  # [QUERY] Create: {"ID": "<uuid>"}

    async def _query_delete(self, request: web.Request) -> web.Response:
        with self.lock:
            self.queries.pop(request.match_info["query"], None)
        return web.json_response(True)

    async def _query_execute(self, request: web.Request) -> web.Response:
        res = self.execute_query(request.match_info["query"])
        if res is None:
            return web.Response(status=404, text="Query not found")
        q, dc, found, failovers = res
        with self.lock:
            nodes = [self._entry(i) for i in found]
        # [QUERY] Execute: Service, Nodes, DNS, Datacenter (where the answer came from),
        # Failovers (datacenters tried before it).
        return web.json_response(
            {
                "Service": q.service,
                "Nodes": nodes,
                "DNS": {"TTL": ""},
                "Datacenter": dc,
                "Failovers": failovers,
            }
        )

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/status/leader", self._leader)
        app.router.add_get("/v1/status/peers", self._peers)
        app.router.add_get("/v1/agent/self", self._agent_self)
        app.router.add_get("/v1/health/service/{service}", self._health_service)
        app.router.add_get("/v1/query", self._query_list)
        app.router.add_post("/v1/query", self._query_create)
        app.router.add_delete("/v1/query/{query}", self._query_delete)
        app.router.add_get("/v1/query/{query}/execute", self._query_execute)
        return app

    def start_http(self) -> None:
        loop = asyncio.new_event_loop()
        self._http_loop = loop
        self._http_thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._http_thread.start()

        async def up() -> web.AppRunner:
            runner = web.AppRunner(self._app(), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.http_port).start()
            return runner

        self._runner = asyncio.run_coroutine_threadsafe(up(), loop).result(timeout=10)

    def stop_http(self) -> None:
        loop, runner = self._http_loop, self._runner
        if loop is None or runner is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
        loop.close()
        self._http_loop = self._runner = self._http_thread = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def dns_address(self) -> str:
        return f"127.0.0.1:{self.dns_port}"

    def start(self) -> ConsulDouble:
        self.start_dns()
        self.start_http()
        return self

    def stop(self) -> None:
        self.stop_dns()
        self.stop_http()


@contextlib.contextmanager
def consul_double(**kw: object) -> Iterator[ConsulDouble]:
    d = ConsulDouble(**kw)  # type: ignore[arg-type]
    d.start()
    try:
        yield d
    finally:
        d.stop()
