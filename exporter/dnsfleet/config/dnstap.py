"""``dnstap``: the listener resolvers stream their dnstap messages to."""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from typing import Any

from dnsfleet.config.addresses import parse_address
from dnsfleet.config.checks import JSON, Check, Duration, Integer, ListOf, key, read_keys
from dnsfleet.config.concepts import AbsolutePath, DnsName
from dnsfleet.config.reader import Node
from dnsfleet.config.targets import Target
from dnsfleet.config.values import quote

MAX_IDENTITIES = 1024
MAX_SEARCH_SUFFIXES = 16  # each one more suffix every NXDOMAIN answer's name is read against
LISTEN_REMOVED = (
    "removed: over TCP any local user could write dnstap (forged SERVFAILs would count "
    "against the SLOs); have the resolvers write to the unix socket (dnstap.socket), whose "
    "permissions (socket_mode) say who may"
)


class Removed(Check):
    """A key no longer accepted: any value is refused, and the message says what instead."""

    def __init__(self, why: str) -> None:
        self.why = why

    def read(self, node: Node) -> Any:
        raise node.error(self.why)

    def schema(self) -> JSON:
        return {"not": {}}


class Domain(DnsName):
    """A domain other than the root, kept lower-case without its trailing dot: every name
    would be under the root."""

    def read(self, node: Node) -> str:
        name = super().read(node).lower().rstrip(".")
        if not name:
            raise node.error("the root: name a domain under it")
        return name

    def schema(self) -> JSON:
        return {"type": "string", "pattern": "[^.]"}


def _parse_suffixes(node: Node) -> tuple[str, ...]:
    items = list(node.sequence())
    if len(items) > MAX_SEARCH_SUFFIXES:
        raise node.error(f"{len(items)} search suffixes exceed {MAX_SEARCH_SUFFIXES}")
    out: list[str] = []
    for item in items:
        name = Domain().read(item)
        if name in out:
            raise item.error(f"{quote(name)} is listed twice")
        out.append(name)
    return tuple(out)


class Suffixes(ListOf):
    def schema(self) -> JSON:
        return {**super().schema(), "uniqueItems": True, "maxItems": MAX_SEARCH_SUFFIXES}


class IdentityMap(Check):
    """dnstap identity (as the resolver sends it) -> the target it is reported as."""

    def read(self, node: Node) -> tuple[tuple[str, str], ...]:
        out: list[tuple[str, str]] = []
        items = list(node.items())
        if len(items) > MAX_IDENTITIES:
            raise node.error(f"{len(items)} identities exceed {MAX_IDENTITIES}")
        for k, v in items:
            if not isinstance(k, str) or not k or len(k) > 64 or not k.isprintable():
                raise v.error("an identity is 1 to 64 printable characters", at_key=True)
            out.append((k, v.string()))
        return tuple(sorted(out))

    def schema(self) -> JSON:
        return {
            "type": "object",
            "propertyNames": {"minLength": 1, "maxLength": 64},
            "additionalProperties": {"type": "string", "minLength": 1},
        }

    def dump(self, value: Any) -> Any:
        return dict(value)


@dataclass(frozen=True)
class DnstapConfig:
    socket: str = field(
        default="",
        metadata=key(
            AbsolutePath(),
            omit="",
            doc="Unix socket resolvers write dnstap to over Frame Streams (unbound "
            "dnstap-socket-path, BIND dnstap-output unix, dnsdist newFrameStreamUnixLogger, "
            "Knot Resolver dnstap socket_path); dnstap is off without it",
        ),
    )
    socket_mode: int = field(
        default=0o660,
        metadata=key(
            Integer(minimum=0, maximum=0o777),
            doc="Permissions of the socket (YAML octal, 0660): put the resolvers' users in "
            "the exporter's group",
        ),
    )
    listen: None = field(
        default=None,
        metadata=key(
            Removed(LISTEN_REMOVED),
            doc="Removed: Frame Streams over TCP let any local user write dnstap; use socket",
        ),
    )
    identities: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=key(
            IdentityMap(),
            doc="dnstap identity -> the target it is reported as, named by its address "
            "(read as targets are: 127.0.0.1:53 names the target written 127.0.0.1) and "
            "reported with that target's labels; an identity naming no target is refused "
            "(unmapped identities are labelled with themselves, up to 32, then `other`)",
        ),
    )
    top_n: int = field(
        default=10,
        metadata=key(
            Integer(minimum=0, maximum=50),
            doc="Registered domains by NXDOMAIN and by SERVFAIL, client addresses, and "
            "random-subdomain suspects shown per target (0: none)",
        ),
    )
    cluster_domain: str = field(
        default="cluster.local",
        metadata=key(
            Domain(),
            doc="The Kubernetes cluster domain: names under it that the resolver sends on "
            "count as leaks, and it and svc.<domain> are search suffixes",
        ),
    )
    search_suffixes: tuple[str, ...] = field(
        default=(),
        metadata=key(
            Suffixes(Domain(), whole=_parse_suffixes),
            doc="Search domains beyond the cluster's (the nodes' own, a company domain): a "
            "name with a dot, one of these appended and answered NXDOMAIN, counts as a "
            "search-list expansion",
        ),
    )
    handshake_timeout: float = field(default=10.0, metadata=key(Duration(maximum=300)))
    idle_timeout: float = field(
        default=60.0,
        metadata=key(
            Duration(maximum=3600),
            doc="A stream stopped in the middle of a frame this long is cut (a quiet stream "
            "between frames is not)",
        ),
    )
    max_connections: int = field(
        default=64,
        metadata=key(
            Integer(minimum=1, maximum=4096),
            doc="Writers connected at once; when all are connected a new writer takes the "
            "slot of the one idle longest, if idle for a second or more (else it is refused), "
            "of those that never sent a data frame first",
        ),
    )

    @property
    def enabled(self) -> bool:
        return bool(self.socket)


def parse_dnstap(node: Node) -> DnstapConfig:
    f = node.fields()
    cfg = DnstapConfig(**read_keys(f, DnstapConfig))
    f.done()
    if cfg.enabled and not _protobuf_installed():
        raise node.child("socket").error(
            "dnstap needs the protobuf Python module, which is not installed (pip install "
            "'dnsfleet[dnstap]', or Debian's python3-protobuf)"
        )
    return cfg


def _protobuf_installed() -> bool:
    """find_spec imports the parent package first: without any ``google`` package installed
    (no protobuf, no other namespace member) it raises instead of answering None."""
    try:
        return importlib.util.find_spec("google.protobuf") is not None
    except ModuleNotFoundError:
        return False


def resolve_identities(node: Node, cfg: DnstapConfig, targets: tuple[Target, ...]) -> DnstapConfig:
    """Each identity names a configured target by its address, normalised as targets are
    (``ip`` is ``ip:53``; ``[::1]:53`` is ``::1``; without a port, a target at that IP on
    another port): it is written back as that target's own address, the ``target`` label
    its probe series carry, so the target's labels (``site``) reach the dnstap series.
    An identity naming no target is an error: its series would join nothing."""
    if not cfg.identities:
        return cfg
    out: list[tuple[str, str]] = []
    for identity, named in cfg.identities:
        where = node.child("identities").child(identity)
        try:
            host, port, scope = parse_address(named)
            explicit = parse_address(named, default_port=0)[1] != 0
        except ValueError as e:
            raise where.error(f"{quote(named)} names no target: {e}") from None
        same = [t for t in targets if (t.host, t.scope_id) == (host, scope)]
        match = [t for t in same if t.port == port] or ([] if explicit else same)
        if not match:
            raise where.error(
                f"{quote(named)} names no target (an identity maps to the address of an "
                "entry under targets)"
            )
        out.append((identity, match[0].address))
    return dataclasses.replace(cfg, identities=tuple(out))
