"""The whole file: its sections read in order, cross-section checks, loading."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnsfleet.config.addresses import parse_address
from dnsfleet.config.checks import ListOf, MapOf, Section, ShortSection, key, read_keys
from dnsfleet.config.concepts import AbsolutePath, Cidrs
from dnsfleet.config.consul import ConsulConfig, parse_consul
from dnsfleet.config.dnstap import DnstapConfig, parse_dnstap, resolve_identities
from dnsfleet.config.files import read_yaml_source
from dnsfleet.config.host import HostConfig, parse_host
from dnsfleet.config.limits import Limits, parse_limits
from dnsfleet.config.modules import DEFAULT_MODULE, Module, parse_module
from dnsfleet.config.nodelocal import NodeLocalConfig, parse_nodelocal
from dnsfleet.config.podview import POD_VIEW_KEY, PodView
from dnsfleet.config.reader import ConfigError, Node, Source
from dnsfleet.config.resolver import ResolverConfig, parse_resolver
from dnsfleet.config.stub import DEFAULT_RESOLV_CONF, ResolvConfWatch, parse_resolv_confs
from dnsfleet.config.targets import Target, check_one_internals_entry, parse_target
from dnsfleet.config.values import quote
from dnsfleet.config.yamlload import collector_paused
from dnsfleet.config.zones import ZONES_KEY, Zone

BUILTIN_SOURCE = "<built-in default>"


@dataclass(frozen=True)
class Config:
    source: str  # the file's path, or BUILTIN_SOURCE
    modules: Mapping[str, Module] = field(
        default_factory=dict, metadata=key(MapOf(Section(Module)), doc="Probe definitions by name")
    )
    targets: tuple[Target, ...] = field(
        default=(), metadata=key(ListOf(Section(Target)), doc="The resolvers probed")
    )
    limits: Limits = field(default_factory=Limits, metadata=key(Section(Limits, parse_limits)))
    host: HostConfig = field(
        default_factory=HostConfig, metadata=key(Section(HostConfig, parse_host))
    )
    resolver: ResolverConfig = field(
        default_factory=ResolverConfig, metadata=key(Section(ResolverConfig, parse_resolver))
    )
    probe_allowlist: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        default=(), metadata=key(Cidrs(), doc="Networks /probe?target= may address")
    )
    consul: ConsulConfig = field(
        default_factory=ConsulConfig, metadata=key(Section(ConsulConfig, parse_consul))
    )
    resolv_conf: tuple[ResolvConfWatch, ...] = field(
        default=DEFAULT_RESOLV_CONF,
        metadata=key(
            ListOf(ShortSection(ResolvConfWatch, short=AbsolutePath()), whole=parse_resolv_confs),
            doc="resolv.conf files whose clients' failover is modelled: paths, or {path, "
            "query_name, query_type, probe_timeout}",
        ),
    )
    zones: tuple[Zone, ...] = field(default=(), metadata=ZONES_KEY)
    dnstap: DnstapConfig = field(
        default_factory=DnstapConfig,
        metadata=key(Section(DnstapConfig, parse_dnstap), doc="Passive SLIs from dnstap"),
    )
    pod_view: tuple[PodView, ...] = field(default=(), metadata=POD_VIEW_KEY)
    nodelocal: NodeLocalConfig = field(
        default_factory=NodeLocalConfig,
        metadata=key(
            Section(NodeLocalConfig, parse_nodelocal),
            doc="NodeLocal DNSCache on this node and the fallback its pods have",
        ),
    )
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)


def parse(data: Any, *, source: str, text: Source | None = None) -> Config:
    """Validate a loaded YAML document into a :class:`Config`; with the ``text`` it was
    read from, errors cite their line and column."""
    root = Node(source, "", data if data is not None else {}, text)
    f = root.fields()
    modules: dict[str, Module] = {}
    module_nodes: list[tuple[str, Node]] = f.opt("modules", [], lambda n: list(n.items()))
    for name, mnode in module_nodes:
        modules[name] = parse_module(name, mnode)
    target_nodes: list[Node] = f.opt("targets", [], Node.sequence)
    targets = tuple(parse_target(t, modules) for t in target_nodes)
    _check_no_duplicate_target(root, targets)
    check_one_internals_entry(root, targets)
    values = read_keys(f, Config, skip=("modules", "targets"))
    values["dnstap"] = resolve_identities(root.child("dnstap"), values["dnstap"], targets)
    cfg = Config(
        source=source,
        modules=modules,
        targets=targets,
        raw=data if isinstance(data, dict) else {},
        **values,
    )
    if len(targets) > cfg.limits.max_targets:
        raise root.child("targets").error(
            f"{len(targets)} targets exceed limits.max_targets ({cfg.limits.max_targets})"
        )
    f.done()
    if not any(f.has(k) for k in MONITORING_KEYS):
        # An empty or truncated file (`: > dnsfleet.yml`, a half-written deploy) must not
        # quietly turn every probe series off: then no probe alert can ever fire.
        raise root.error(
            ("the file is empty" if not f.node.value else "nothing to monitor")
            + ": it has no "
            + ", ".join(MONITORING_KEYS[:-1])
            + f" or {MONITORING_KEYS[-1]} section"
            " (write `targets: []` to run only the host collectors on purpose)"
        )
    return cfg


def _check_no_duplicate_target(root: Node, targets: tuple[Target, ...]) -> None:
    """A target is its address (IP, port, IPv6 zone; ``ip`` is ``ip:53``, ``[::1]:53`` is
    ``::1``) and its module: two entries for one would probe the resolver twice and export
    two series sets for it under two spellings."""
    first: dict[tuple[str, int, int, str], int] = {}
    for i, t in enumerate(targets):
        j = first.setdefault((t.host, t.port, t.scope_id, t.module), i)
        if j == i:
            continue
        same = "" if targets[j].address == t.address else f" ({quote(targets[j].address)})"
        raise (
            root.child("targets")
            .child(i)
            .error(
                f"duplicate target {quote(t.address)} with module {quote(t.module)}: the "
                f"same address as targets[{j}]{same}"
            )
        )


# A config must set at least one of these, if only to an empty list (see parse); a key
# with no value (`targets:`, as a file cut short leaves it) does not count.
MONITORING_KEYS = ("targets", "resolv_conf", "consul", "zones", "dnstap", "pod_view", "nodelocal")


def load(path: str | Path) -> Config:
    """Read and validate; ConfigError (file, key path, problem) for every bad input."""
    with collector_paused():  # see collector_paused: validation too builds what it keeps
        return _load(path)


def _load(path: str | Path) -> Config:
    data, text = read_yaml_source(path)
    try:
        return parse(data, source=str(path), text=text)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    except Exception as e:  # a validator that missed a case must not become a traceback
        raise ConfigError(f"{path}: invalid configuration ({type(e).__name__}: {e})") from None


def builtin_default(nameservers: list[str]) -> Config:
    """The configuration ``dnsfleet-exporter`` runs with no --config.file: probe every
    nameserver of the host's resolv.conf with the ``recursive`` module."""
    targets = []
    for ns in nameservers:
        try:
            host, port, scope = parse_address(ns)
        except ValueError:
            continue
        targets.append(Target(address=ns, host=host, port=port, module="recursive", scope_id=scope))
    return Config(
        source=BUILTIN_SOURCE, modules={"recursive": DEFAULT_MODULE}, targets=tuple(targets)
    )
