"""deploy/kubernetes' sharded probing (components/probe-shards, components/prometheus-agent)
and the selector labels from generate.yml: the generated files are current; the Probes' and
ScrapeConfigs' relabelling, run here with the operator's own rules around it, sends every
target to exactly one exporter replica and one Prometheus shard, by sharded.yml's scheme;
the base with both components, rendered by kustomize, is valid against the Prometheus
Operator's CRD schemas (v0.85.0, from its Go module) and the Kubernetes schemas."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy.kubernetes import generate, shards

from dnsfleet.config import load
from tests.harness import operatorcrds
from tests.test_kubernetes import K8S_VERSION, kubectl, one
from tests.test_scaleout import SHARDED, hashmod

KDIR = generate.KDIR
INPUT = yaml.safe_load(generate.INPUT.read_text())
SHARDING = INPUT["sharding"]
# What kube-prometheus-stack's Prometheus selects by default (its Helm release's name).
STOCK = {"release": "kube-prometheus-stack"}


@pytest.mark.unit
def test_generated_files_are_current() -> None:
    for path, text in generate.render_all().items():
        assert path.read_text() == text, f"{path} is stale: run `make k8s`"


@pytest.mark.unit
def test_selector_labels_come_from_the_input() -> None:
    cfg = {**INPUT, "selector_labels": {"release": "stack-a", "example.com/team": "dns"}}
    files = generate.render_all(cfg)
    (patch,) = yaml.safe_load_all(files[KDIR / "selector-labels.yaml"])
    assert patch == [
        {"op": "add", "path": "/metadata/labels/release", "value": "stack-a"},
        {"op": "add", "path": "/metadata/labels/example.com~1team", "value": "dns"},
    ]
    docs = list(yaml.safe_load_all(files[generate.SHARDS_DIR / "monitoring.yaml"]))
    assert {d["kind"] for d in docs} == {"Probe", "ScrapeConfig"}
    for d in docs:
        assert d["metadata"]["labels"]["release"] == "stack-a"
    # The sharding section's own labels win: `{}` leaves the Probes to the agent alone.
    cfg["sharding"] = {**SHARDING, "selector_labels": {}}
    docs = list(
        yaml.safe_load_all(generate.render_all(cfg)[generate.SHARDS_DIR / "monitoring.yaml"])
    )
    for d in docs:
        assert "release" not in d["metadata"]["labels"]
        assert shards.COMPONENT.items() <= d["metadata"]["labels"].items()


def _snake(rule: dict[str, Any]) -> dict[str, Any]:
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(k, k): v for k, v in rule.items()}


@pytest.mark.unit
def test_replica_split_is_sharded_yml_scheme() -> None:
    """The same rules as compose/prometheus/examples/sharded.yml from `target` on, the
    replicas' addresses apart."""
    (job,) = yaml.safe_load(SHARDED.read_text())["scrape_configs"]
    compose = job["relabel_configs"]
    start = compose.index({"source_labels": ["__param_target"], "target_label": "target"})
    ours = [_snake(r) for r in shards.replica_relabelings(2)]
    for rule in (*compose[start:], *ours):
        if rule.get("target_label") == "__address__":
            rule["replacement"] = "<replica>"
    site = {"source_labels": ["site"], "regex": "", "target_label": "site"}
    assert [r for r in compose[start:] if not site.items() <= r.items()] == ours


# ------------------------------------------------------------------ relabelling, run


def _relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus' relabelling (model/relabel) for the actions used here: replace,
    hashmod and keep; None when a rule drops the target."""
    labels = dict(labels)
    for r in rules:
        value = ";".join(labels.get(s, "") for s in r.get("sourceLabels", []))
        action = r.get("action", "replace")
        rx = re.compile(f"^(?:{r.get('regex', '(.*)')})$")
        if action == "hashmod":
            labels[r["targetLabel"]] = str(hashmod(value, r["modulus"]))
        elif action == "keep":
            if not rx.match(value):
                return None
        elif m := rx.match(value):
            repl = r.get("replacement", "$1")
            out = re.sub(r"\$\{?(\d+)\}?", lambda g: m.group(int(g.group(1))) or "", repl)
            labels[r["targetLabel"]] = out
            if not out:
                del labels[r["targetLabel"]]
    return labels


def _operator_probe_rules(probe: dict[str, Any], nshards: int) -> list[dict[str, Any]]:
    """What the operator puts around a static Probe's relabelling (pkg/prometheus/promcfg.go
    at v0.85.0: generateProbeConfig, appendShardingRelabelingForProbes)."""
    spec = probe["spec"]
    return [
        {"sourceLabels": ["__address__"], "targetLabel": "__param_target"},
        {"sourceLabels": ["__param_target"], "targetLabel": "instance"},
        {"targetLabel": "__address__", "replacement": spec["prober"]["url"]},
        *spec["targets"]["staticConfig"]["relabelingConfigs"],
        {
            "sourceLabels": ["__param_target", "__tmp_hash"],
            "targetLabel": "__tmp_hash",
            "regex": "(.+);",
            "replacement": "$1",
        },
        {
            "sourceLabels": ["__tmp_hash"],
            "targetLabel": "__tmp_hash",
            "modulus": nshards,
            "action": "hashmod",
        },
        {
            "sourceLabels": ["__tmp_hash", "__tmp_disable_sharding"],
            "regex": "$(SHARD);|.+;.+",
            "action": "keep",
        },
    ]


def _shard(rules: list[dict[str, Any]], shard: int) -> list[dict[str, Any]]:
    # The operator's config reloader fills in each shard's number.
    return [
        {**r, "regex": r["regex"].replace("$(SHARD)", str(shard))} if "regex" in r else r
        for r in rules
    ]


@pytest.mark.unit
@pytest.mark.parametrize(("replicas", "nshards"), [(4, 2), (3, 2), (1, 1), (6, 3)])
def test_every_target_goes_to_one_replica_and_one_shard(replicas: int, nshards: int) -> None:
    cfg = {**SHARDING, "replicas": replicas, "shards": nshards}
    targets = [f"10.{i // 250}.{i % 250}.53" for i in range(600)]
    probe_doc = shards.probe({"name": "t", "module": "m", "site": "s", "targets": []}, cfg, {})
    sc_doc = shards.scrape_config({"name": "t", "module": "m", "http_sd": "http://x"}, cfg, {})
    # A ScrapeConfig with a hashmod rule gets no sharding from the operator
    # (appendShardingRelabelingWithAddressIfMissing): it must carry its own.
    assert any(r.get("action") == "hashmod" for r in sc_doc["spec"]["relabelings"])
    for name, rules, initial in (
        ("Probe", _operator_probe_rules(probe_doc, nshards), {"site": "s"}),
        ("ScrapeConfig", sc_doc["spec"]["relabelings"], {}),
    ):
        per_replica_shards: dict[str, set[int]] = {}
        for t in targets:
            kept = [
                (s, out)
                for s in range(nshards)
                if (out := _relabel({"__address__": t, **initial}, _shard(rules, s)))
            ]
            assert len(kept) == 1, (name, t, kept)
            ((s, out),) = kept
            assert s == hashmod(t, nshards)
            assert out["__address__"] == shards.replica_address(hashmod(t, replicas)), name
            assert out["exporter"] == out["__address__"]
            assert (out["instance"], out["target"], out["__param_target"]) == (t, t, t)
            assert out.get("site") in ("s", "unassigned")
            per_replica_shards.setdefault(out["__address__"], set()).add(s)
        assert len(per_replica_shards) == replicas
        if replicas % nshards == 0:
            # Each replica then answers one Prometheus shard only.
            assert all(len(v) == 1 for v in per_replica_shards.values()), per_replica_shards


# ------------------------------------------------------------------ rendered, validated


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The base with both components, from an overlay of the user's own (kustomize refuses
    an overlay inside its base's directory)."""
    overlay = tmp_path_factory.mktemp("overlay")
    rel = Path(os.path.relpath(KDIR, overlay))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel)],
                "components": [
                    str(rel / "components" / "probe-shards"),
                    str(rel / "components" / "prometheus-agent"),
                ],
            }
        )
    )
    out = subprocess.run(
        [kubectl(), "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _operator_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]


def _validator(doc: dict[str, Any], *, strict: bool) -> jsonschema.Draft4Validator:
    s = operatorcrds.schema(doc["kind"], doc["apiVersion"].split("/")[1])
    return jsonschema.Draft4Validator(operatorcrds.strict(s) if strict else s)


@pytest.mark.integration
def test_operator_resources_valid_against_the_crds(rendered: list[dict[str, Any]]) -> None:
    docs = _operator_docs(rendered)
    assert sorted(d["kind"] for d in docs) == [
        "PodMonitor",
        "Probe",
        "PrometheusAgent",
        "PrometheusRule",
        "ScrapeConfig",
        "ServiceMonitor",
    ]
    for d in docs:
        errors = [e.message for e in _validator(d, strict=True).iter_errors(d)]
        assert not errors, (d["kind"], errors)


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = doc
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[last] = value


@pytest.mark.integration
@pytest.mark.parametrize(
    ("kind", "path", "value", "strict_only"),
    [
        ("PrometheusAgent", "spec.shards", "2", False),  # a string where int32 is due
        ("Probe", "spec.targets.staticConfig.relabelingConfigs.1.action", "hashmood", False),
        ("ScrapeConfig", "spec.httpSDConfigs.0.url", "inventory.example.net", False),
        ("ScrapeConfig", "spec.relabellings", [], True),  # misspelt: pruned, or refused
        ("Probe", "spec.prober.uri", "x:9853", True),
    ],
)
def test_the_crd_schemas_refuse(
    rendered: list[dict[str, Any]], kind: str, path: str, value: Any, strict_only: bool
) -> None:
    """A wrong type, an unknown enum member or pattern is refused by the schema itself; an
    unknown field only under strict field validation (the schema does not close its
    objects: without it the API server drops the field silently)."""
    (doc,) = [d for d in _operator_docs(rendered) if d["kind"] == kind]
    bad = yaml.safe_load(yaml.safe_dump(doc))
    _set(bad, path, value)
    assert not _validator(bad, strict=True).is_valid(bad)
    assert _validator(bad, strict=False).is_valid(bad) is strict_only


@pytest.mark.integration
def test_component_builtin_objects_valid(rendered: list[dict[str, Any]]) -> None:
    ours = [
        d
        for d in rendered
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "probe"
        or d["metadata"]["name"].startswith(f"{shards.NAME}-config")
    ]
    kinds = sorted(d["kind"] for d in ours if not d["apiVersion"].startswith("monitoring."))
    assert kinds == ["ConfigMap", "NetworkPolicy", "Service", "StatefulSet"]
    for d in ours:
        if not d["apiVersion"].startswith("monitoring."):
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)


@pytest.mark.integration
def test_probes_reach_the_replicas(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    sts = one(rendered, "StatefulSet", shards.NAME)
    svc = one(rendered, "Service", shards.NAME)
    assert sts["spec"]["replicas"] == SHARDING["replicas"]
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert svc["spec"]["clusterIP"] == "None"
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    ns, port = sts["metadata"]["namespace"], svc["spec"]["ports"][0]["port"]
    pods = {
        f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}.{ns}.svc:{port}"
        for i in range(sts["spec"]["replicas"])
    }
    # The replicas' config: the exporter's own loader, every module named, every static
    # target inside the allowlist.
    (cm,) = [d for d in rendered if d["metadata"]["name"].startswith(f"{shards.NAME}-config")]
    (vol,) = sts["spec"]["template"]["spec"]["volumes"]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
    (tmp_path / "probe.yml").write_text(cm["data"]["probe.yml"])
    cfg = load(str(tmp_path / "probe.yml"))
    for d in _operator_docs(rendered):
        if d["kind"] == "Probe":
            rules = d["spec"]["targets"]["staticConfig"]["relabelingConfigs"]
            assert d["spec"]["module"] in cfg.modules
            for t in d["spec"]["targets"]["staticConfig"]["static"]:
                addr = ipaddress.ip_address(t)
                assert any(addr in net for net in cfg.probe_allowlist), t
        elif d["kind"] == "ScrapeConfig":
            rules = d["spec"]["relabelings"]
            assert d["spec"]["params"]["module"][0] in cfg.modules
        else:
            continue
        addresses = {r["replacement"] for r in rules if r.get("targetLabel") == "__address__"}
        assert addresses == pods, d["metadata"]["name"]


@pytest.mark.integration
def test_selectors_pick_up_what_they_should(rendered: list[dict[str, Any]]) -> None:
    """A stock kube-prometheus-stack selects the rules, monitors, Probes and ScrapeConfigs
    by `release`; the agent selects the component's Probes and ScrapeConfigs, and the
    replicas' NetworkPolicy admits both Prometheus and the agent's pods."""
    for d in _operator_docs(rendered):
        if d["kind"] != "PrometheusAgent":
            assert STOCK.items() <= d["metadata"]["labels"].items(), d["kind"]
    agent = one(rendered, "PrometheusAgent", shards.NAME)
    assert agent["spec"]["shards"] == SHARDING["shards"]
    for kind, selector in (("Probe", "probeSelector"), ("ScrapeConfig", "scrapeConfigSelector")):
        want = agent["spec"][selector]["matchLabels"].items()
        docs = [d for d in rendered if d["kind"] == kind]
        assert docs and all(want <= d["metadata"]["labels"].items() for d in docs)
        assert all(d["metadata"]["namespace"] == agent["metadata"]["namespace"] for d in docs)
    np_ = one(rendered, "NetworkPolicy", shards.NAME)
    sts = one(rendered, "StatefulSet", shards.NAME)
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert np_["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    peers = [p["podSelector"]["matchLabels"] for p in np_["spec"]["ingress"][0]["from"]]
    # The operator labels the agent's pods so (pkg/prometheus/agent: applicationNameLabelValue).
    assert {"app.kubernetes.io/name": "prometheus-agent"} in peers
    assert {"app.kubernetes.io/name": "prometheus"} in peers
