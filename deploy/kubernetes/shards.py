"""The Prometheus Operator resources of the optional component components/probe-shards
(and components/prometheus-agent), rendered from the `sharding:` section of generate.yml.

Two splits, both by hashmod over the probed target (`__param_target`), as
compose/prometheus/examples/sharded.yml splits it:
- exporter replicas: md5(target) mod `replicas` picks the StatefulSet pod that probes it
  (`__tmp_shard`, then `__address__` rewritten to that pod's stable name);
- Prometheus shards: md5(target) mod `shards` picks the Prometheus (or agent) shard that
  scrapes it. The operator adds that split itself to a Probe (over `__param_target`), but
  leaves a ScrapeConfig unsharded once it holds any hashmod rule, so the ScrapeConfig keeps
  the targets of `$(SHARD)`, the shard number the operator's config reloader fills in.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "dnsfleet"
NAME = "dnsfleet-probe"
PORT = 9853
COMMON = {"app.kubernetes.io/name": "dnsfleet", "app.kubernetes.io/part-of": "dnsfleet"}
COMPONENT = {**COMMON, "app.kubernetes.io/component": "probe"}
# The operator names its shard's number so in the configuration it writes, and its config
# reloader replaces it in each shard's copy.
SHARD_VAR = "$(SHARD)"


def replica_address(i: int) -> str:
    """The stable DNS name of StatefulSet pod i behind its headless Service."""
    return f"{NAME}-{i}.{NAME}.{NAMESPACE}.svc:{PORT}"


def replica_relabelings(replicas: int) -> list[dict[str, Any]]:
    """md5(target) mod replicas picks the exporter replica; the instance label is the
    target, so series stay the same when a target moves to another replica."""
    rules: list[dict[str, Any]] = [
        {"sourceLabels": ["__param_target"], "targetLabel": "target"},
        {
            "sourceLabels": ["__param_target"],
            "modulus": replicas,
            "targetLabel": "__tmp_shard",
            "action": "hashmod",
        },
        {"sourceLabels": ["__param_target"], "targetLabel": "instance"},
    ]
    rules += [
        {
            "sourceLabels": ["__tmp_shard"],
            "regex": str(i),
            "targetLabel": "__address__",
            "replacement": replica_address(i),
        }
        for i in range(replicas)
    ]
    # Which replica probed it (for dashboards and debugging the sharding).
    rules.append({"sourceLabels": ["__address__"], "targetLabel": "exporter"})
    return rules


def prometheus_shard_relabelings(shards: int) -> list[dict[str, Any]]:
    """The operator's own split, written out for a ScrapeConfig (which it leaves unsharded
    once a hashmod rule is there): md5(target) mod shards, kept by the shard whose number
    it is."""
    return [
        {
            "sourceLabels": ["__param_target"],
            "modulus": shards,
            "targetLabel": "__tmp_hash",
            "action": "hashmod",
        },
        {"sourceLabels": ["__tmp_hash"], "regex": SHARD_VAR, "action": "keep"},
    ]


def _meta(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": labels}


def probe(group: dict[str, Any], cfg: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """A Probe of a static list: the operator sets `__param_target` and `instance` from each
    target and `__address__` to the prober; these rules then pick the replica."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Probe",
        "metadata": _meta(f"{NAME}-{group['name']}", labels),
        "spec": {
            "jobName": f"{NAME}-{group['name']}",
            "module": group["module"],
            "interval": cfg["interval"],
            "scrapeTimeout": cfg["scrape_timeout"],
            "prober": {"url": f"{NAME}.{NAMESPACE}.svc:{PORT}", "path": "/probe"},
            "targets": {
                "staticConfig": {
                    "static": list(group["targets"]),
                    "labels": {"site": group["site"]},
                    "relabelingConfigs": replica_relabelings(cfg["replicas"]),
                }
            },
        },
    }


def scrape_config(
    group: dict[str, Any], cfg: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    """A ScrapeConfig for targets from HTTP service discovery (a CMDB, an inventory): the
    relabelling of sharded.yml, then the Prometheus shard's own share."""
    relabelings: list[dict[str, Any]] = [
        {"sourceLabels": ["__address__"], "targetLabel": "__param_target"},
        {
            "sourceLabels": ["site"],
            "regex": "",
            "targetLabel": "site",
            "replacement": "unassigned",
        },
        *replica_relabelings(cfg["replicas"]),
        *prometheus_shard_relabelings(cfg["shards"]),
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "ScrapeConfig",
        "metadata": _meta(f"{NAME}-{group['name']}", labels),
        "spec": {
            "jobName": f"{NAME}-{group['name']}",
            "metricsPath": "/probe",
            "params": {"module": [group["module"]]},
            "scrapeInterval": cfg["interval"],
            "scrapeTimeout": cfg["scrape_timeout"],
            "httpSDConfigs": [{"url": group["http_sd"]}],
            "relabelings": relabelings,
        },
    }


def prometheus_agent(cfg: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """An agent sharded `shards` ways that scrapes the component's Probes and ScrapeConfigs
    (by the component's own labels, in its namespace) and remote-writes them upward."""
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "PrometheusAgent",
        "metadata": _meta(NAME, labels),
        "spec": {
            "shards": cfg["shards"],
            "probeSelector": {"matchLabels": dict(COMPONENT)},
            "scrapeConfigSelector": {"matchLabels": dict(COMPONENT)},
            "remoteWrite": [{"url": cfg["remote_write"]}],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    }


def resources(cfg: dict[str, Any], selector_labels: dict[str, str]) -> list[dict[str, Any]]:
    """The component's monitoring resources: a Probe per static group, a ScrapeConfig per
    discovered one, each carrying the selector labels a stock Prometheus looks for (the
    section's own, where it names them: `{}` leaves them to the agent alone)."""
    labels = {**COMPONENT, **cfg.get("selector_labels", selector_labels)}
    docs = []
    for group in cfg.get("probes", []):
        docs.append(probe(group, cfg, labels))
    for group in cfg.get("scrape_configs", []):
        docs.append(scrape_config(group, cfg, labels))
    return docs
