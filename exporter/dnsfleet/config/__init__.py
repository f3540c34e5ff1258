"""Strict YAML configuration: unknown keys rejected, defaults then validation, once at load.

Every error names the file, the key path and the problem, e.g.::

    dnsfleet.yml: modules.recursive.timeout: invalid duration "2x" (use a number and
    a unit: 500ms, 2s, 1m)

One module per section of the file (``modules``, ``targets``, ``consul``, ...); the
:mod:`~dnsfleet.config.reader` gives each section's reader a :class:`Node`, which knows
where it is in the file so messages can say so. This package re-exports the public names,
so ``from dnsfleet.config import X`` is the one import callers need.
"""

from dnsfleet.config.addresses import DEFAULT_DNS_PORT, Endpoint, parse_address
from dnsfleet.config.consul import (
    CONSUL_DEFAULT_DNS,
    CONSUL_DEFAULT_HTTP,
    CONSUL_DNS_PORT,
    ConsulAgent,
    ConsulConfig,
    ConsulService,
)
from dnsfleet.config.dnstap import DnstapConfig
from dnsfleet.config.document import (
    BUILTIN_SOURCE,
    MONITORING_KEYS,
    Config,
    builtin_default,
    load,
    parse,
)
from dnsfleet.config.dump import to_yaml
from dnsfleet.config.files import read_yaml_mapping
from dnsfleet.config.host import HOST_COLLECTORS, HostConfig
from dnsfleet.config.limits import Limits
from dnsfleet.config.modules import DEFAULT_MODULE, TRANSPORTS, Module, Transport
from dnsfleet.config.nodelocal import NodeLocalConfig
from dnsfleet.config.podview import PodView
from dnsfleet.config.reader import ConfigError, Fields, Node
from dnsfleet.config.resolver import DEFAULT_CAPACITY_FILE, ResolverConfig
from dnsfleet.config.stub import DEFAULT_RESOLV_CONF, ResolvConfWatch
from dnsfleet.config.targets import (
    HTTP_STATS_TYPES,
    LABEL_NAME_RE,
    RESERVED_LABELS,
    STATS_TYPES,
    StatsSource,
    StatsType,
    Target,
)
from dnsfleet.config.values import parse_duration
from dnsfleet.config.zones import Zone

__all__ = [
    "BUILTIN_SOURCE",
    "CONSUL_DEFAULT_DNS",
    "CONSUL_DEFAULT_HTTP",
    "CONSUL_DNS_PORT",
    "DEFAULT_CAPACITY_FILE",
    "DEFAULT_DNS_PORT",
    "DEFAULT_MODULE",
    "DEFAULT_RESOLV_CONF",
    "HOST_COLLECTORS",
    "HTTP_STATS_TYPES",
    "LABEL_NAME_RE",
    "MONITORING_KEYS",
    "RESERVED_LABELS",
    "STATS_TYPES",
    "TRANSPORTS",
    "Config",
    "ConfigError",
    "ConsulAgent",
    "ConsulConfig",
    "ConsulService",
    "DnstapConfig",
    "Endpoint",
    "Fields",
    "HostConfig",
    "Limits",
    "Module",
    "Node",
    "NodeLocalConfig",
    "PodView",
    "ResolvConfWatch",
    "ResolverConfig",
    "StatsSource",
    "StatsType",
    "Target",
    "Transport",
    "Zone",
    "builtin_default",
    "load",
    "parse",
    "parse_address",
    "parse_duration",
    "read_yaml_mapping",
    "to_yaml",
]
