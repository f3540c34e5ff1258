"""The whole file: its sections read in order, cross-section checks, loading."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnsfleet.config.addresses import parse_address
from dnsfleet.config.consul import ConsulConfig, _parse_consul
from dnsfleet.config.host import HostConfig, _parse_host
from dnsfleet.config.limits import Limits, _parse_limits
from dnsfleet.config.modules import DEFAULT_MODULE, Module, _parse_module
from dnsfleet.config.reader import ConfigError, Node, _show, read_yaml_mapping
from dnsfleet.config.resolver import ResolverConfig, _parse_resolver
from dnsfleet.config.stub import DEFAULT_RESOLV_CONF, ResolvConfWatch, _parse_resolv_conf
from dnsfleet.config.targets import Target, _check_one_internals_entry, _parse_target

BUILTIN_SOURCE = "<built-in default>"


@dataclass(frozen=True)
class Config:
    source: str
    modules: Mapping[str, Module]
    targets: tuple[Target, ...]
    limits: Limits = field(default_factory=Limits)
    host: HostConfig = field(default_factory=HostConfig)
    resolver: ResolverConfig = field(default_factory=ResolverConfig)
    probe_allowlist: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    consul: ConsulConfig = field(default_factory=ConsulConfig)
    resolv_conf: tuple[ResolvConfWatch, ...] = DEFAULT_RESOLV_CONF
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def module_for(self, target: Target) -> Module:
        return self.modules[target.module]


def _parse_allowlist(node: Node) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    out = []
    for item in node.sequence():
        try:
            out.append(ipaddress.ip_network(item.string(), strict=False))
        except ValueError as e:
            raise item.error(f"invalid CIDR: {e}") from None
    return tuple(out)



def parse(data: Any, *, source: str) -> Config:
    """Validate a loaded YAML document into a :class:`Config`."""
    root = Node(source, "", data if data is not None else {})
    f = root.fields()
    modules: dict[str, Module] = {}
    module_nodes: list[tuple[str, Node]] = f.opt("modules", [], lambda n: list(n.items()))
    for name, mnode in module_nodes:
        modules[name] = _parse_module(name, mnode)
    target_nodes: list[Node] = f.opt("targets", [], Node.sequence)
    targets = tuple(_parse_target(t, modules) for t in target_nodes)
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(targets):
        if (t.address, t.module) in seen:
            raise root.child("targets").child(i).error(
                f"duplicate target {_show(t.address)} with module {_show(t.module)}")
        seen.add((t.address, t.module))
    _check_one_internals_entry(root, targets)
    limits = f.opt("limits", Limits(), _parse_limits)
    if len(targets) > limits.max_targets:
        raise root.child("targets").error(
            f"{len(targets)} targets exceed limits.max_targets ({limits.max_targets})")
    cfg = Config(
        source=source,
        modules=modules,
        targets=targets,
        limits=limits,
        host=f.opt("host", HostConfig(), _parse_host),
        resolver=f.opt("resolver", ResolverConfig(), _parse_resolver),
        probe_allowlist=f.opt("probe_allowlist", (), _parse_allowlist),
        consul=f.opt("consul", ConsulConfig(), _parse_consul),
        resolv_conf=f.opt("resolv_conf", DEFAULT_RESOLV_CONF, _parse_resolv_conf),
        raw=data if isinstance(data, dict) else {},
    )
    f.done()
    if not any(f.has(key) for key in MONITORING_KEYS):
        # An empty or truncated file (`: > dnsfleet.yml`, a half-written deploy) must not
        # quietly turn every probe series off: then no probe alert can ever fire.
        raise root.error(
            ("the file is empty" if not f.node.value else "nothing to monitor")
            + ": it has no targets, resolv_conf or consul section (write `targets: []` to "
            "run only the host collectors on purpose)")
    return cfg


# A config must set at least one of these, if only to an empty list (see parse); a key
# with no value (`targets:`, as a file cut short leaves it) does not count.
MONITORING_KEYS = ("targets", "resolv_conf", "consul")



def load(path: str | Path) -> Config:
    """Read and validate; ConfigError (file, key path, problem) for every bad input."""
    data = read_yaml_mapping(path)
    try:
        return parse(data, source=str(path))
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
        targets.append(Target(address=ns, host=host, port=port, module="recursive",
                              scope_id=scope))
    return Config(source=BUILTIN_SOURCE, modules={"recursive": DEFAULT_MODULE},
                  targets=tuple(targets))
