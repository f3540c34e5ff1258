"""The Prometheus Operator's CRD schemas at a pinned release, for validating rendered
resources: the operator's Go module (from the Go module proxy, `go mod download`, into Go's
module cache) carries the CRDs under example/prometheus-operator-crd/; each version's
openAPIV3Schema is extracted once into .cache/crds (ignored by git), never committed."""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.harness import gotools

MODULE = "github.com/prometheus-operator/prometheus-operator"
VERSION = "v0.85.0"
CACHE = gotools.ROOT / ".cache" / "crds" / f"prometheus-operator-{VERSION}"


class _Loader(yaml.SafeLoader):
    """PyYAML resolves a bare `=` to YAML 1.1's `value` type, which it cannot construct;
    Kubernetes reads it as the string "=" (an enum member of the relabel actions)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _module_dir() -> Path:
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [gotools._go(), "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        cwd=CACHE.parent,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return Path(json.loads(out.stdout)["Dir"])


def _extract() -> None:
    tmp = CACHE.with_name(f"{CACHE.name}.{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in sorted((_module_dir() / "example" / "prometheus-operator-crd").glob("*.yaml")):
        crd = yaml.load(f.read_text(), Loader=_Loader)
        for v in crd["spec"]["versions"]:
            name = f"{crd['spec']['names']['kind']}-{v['name']}.json"
            (tmp / name).write_text(json.dumps(v["schema"]["openAPIV3Schema"]))
    try:
        tmp.replace(CACHE)
    except OSError:
        # Another test process extracted the same files first.
        shutil.rmtree(tmp)


@functools.cache
def schema(kind: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of kind at version (v1, v1alpha1) of monitoring.coreos.com."""
    if not CACHE.is_dir():
        _extract()
    path = CACHE / f"{kind}-{version}.json"
    assert path.is_file(), f"{kind} {version}: no such CRD version in {VERSION}"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def strict(s: dict[str, Any]) -> dict[str, Any]:
    """The schema as the API server applies it under strict field validation (kubectl's
    default since 1.27): an unknown field of an object with declared properties is an
    error, where the CRD does not keep unknown fields. The schemas rarely say
    `additionalProperties: false` themselves: the server prunes or refuses instead."""
    out = copy.deepcopy(s)

    def walk(node: dict[str, Any]) -> None:
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        children = [*node.get("properties", {}).values()]
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                children.append(node[key])
        for key in ("allOf", "anyOf", "oneOf"):
            children.extend(node.get(key, []))
        for child in children:
            walk(child)

    walk(out)
    return out
