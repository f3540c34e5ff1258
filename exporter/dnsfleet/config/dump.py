"""The effective configuration as YAML, defaults filled in (served on /config)."""

from __future__ import annotations

from typing import Any

import yaml

from dnsfleet.config.consul import ConsulAgent, ConsulConfig
from dnsfleet.config.document import Config


def to_yaml(cfg: Config) -> str:
    """The effective configuration, defaults filled in (served on /config)."""
    doc: dict[str, Any] = {
        "modules": {
            m.name: {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in m.__dict__.items() if k != "name"}
            for m in cfg.modules.values()
        },
        "targets": [
            {"address": t.address, "module": t.module, "labels": dict(t.labels),
             **({"stats": {k: ("<secret>" if k == "api_key" else v)
                           for k, v in t.stats.__dict__.items() if v not in (None, "")}}
                if t.stats else {}),
             **({"capacity_qps": t.capacity_qps} if t.capacity_qps is not None else {}),
             **({"backends": t.backends} if t.backends != "single" else {})}
            for t in cfg.targets
        ],
        "limits": dict(cfg.limits.__dict__),
        "host": {"collectors": list(cfg.host.collectors),
                 "resolver_process": cfg.host.resolver_process,
                 "nic_include": cfg.host.nic_include,
                 "nic_exclude": cfg.host.nic_exclude},
        "resolver": dict(cfg.resolver.__dict__),
        "probe_allowlist": [str(n) for n in cfg.probe_allowlist],
        "consul": _consul_yaml(cfg.consul),
        "resolv_conf": [dict(w.__dict__) for w in cfg.resolv_conf],
    }
    return f"# source: {cfg.source}\n" + yaml.safe_dump(doc, sort_keys=False)


def _consul_yaml(c: ConsulConfig) -> dict[str, Any]:
    def dns(a: ConsulAgent) -> str:
        return f"[{a.dns_host}]:{a.dns_port}" if ":" in a.dns_host else f"{a.dns_host}:{a.dns_port}"

    return {
        # token_file is a path, never the token; the token is not in the config at all.
        "agents": [{"name": a.name, "dns_address": dns(a), "http_address": a.http_address,
                    "token_file": a.token_file, "data_dir": a.data_dir,
                    "dns_only_passing": a.dns_only_passing,
                    "a_record_limit": a.a_record_limit} for a in c.agents],
        "services": [{"name": s.name, "tag": s.tag} for s in c.services],
        "prepared_queries": list(c.prepared_queries),
        "timeout": c.timeout,
    }
