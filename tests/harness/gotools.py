"""Go programs the tests run, built from the Go module proxy into .cache/tools (ignored by
git) with the go toolchain: actionlint, Sloth, Prometheus 3 (promtool, prometheus) and
VictoriaMetrics (single-node and vmalert) at pinned versions, tests/psa (the Pod Security
Admission's own policy code) and tests/coredns (a CoreDNS with few plugins). Each binary is
named with its version, so a suite builds it once; Go's module and build caches make a
rebuild take seconds (Prometheus' first build takes minutes on 2 cores; VictoriaMetrics'
about one)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".cache" / "tools"
ACTIONLINT = "github.com/rhysd/actionlint/cmd/actionlint"
ACTIONLINT_VERSION = "v1.7.12"
SLOTH = "github.com/slok/sloth/cmd/sloth"
SLOTH_VERSION = "v0.16.0"
# Prometheus 3.x's Go module versions are v0.3xx.y (3.16.0 is v0.316.0). Classic
# histograms' `le` labels read as floats there ("1.0"), which the SLO rules must match.
PROMETHEUS = "github.com/prometheus/prometheus/cmd"
PROMETHEUS_VERSION = "v0.316.0"
VICTORIAMETRICS = "github.com/VictoriaMetrics/VictoriaMetrics/app"
VICTORIAMETRICS_VERSION = "v1.151.0"


def _go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None
    )
    if go is None:
        pytest.fail("the go toolchain is missing: it builds actionlint and tests/psa")
    return go


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, f"{' '.join(cmd)}:\n{out.stdout}{out.stderr}"


def _install(package: str, version: str, name: str) -> str:
    """``go install package@version`` into TOOLS as name-version, once."""
    target = TOOLS / f"{name}-{version}"
    if not target.exists():
        gobin = TOOLS / f"gobin-{name}-{os.getpid()}"
        _run(
            [_go(), "install", f"{package}@{version}"],
            cwd=ROOT,
            env={"GOBIN": str(gobin), "GOFLAGS": "-mod=mod"},
        )
        (gobin / name).replace(target)
        gobin.rmdir()
    return str(target)


def actionlint() -> str:
    """actionlint at ACTIONLINT_VERSION (go install; the PyPI wrapper downloads a binary
    at build time, which cannot work here)."""
    return _install(ACTIONLINT, ACTIONLINT_VERSION, "actionlint")


def sloth() -> str:
    """Sloth at SLOTH_VERSION: validates alerts/sloth and generates its rules."""
    return _install(SLOTH, SLOTH_VERSION, "sloth")


def prometheus3_tool(name: str) -> str:
    """``promtool`` or ``prometheus`` of Prometheus 3 (PROMETHEUS_VERSION); Debian ships 2.x."""
    assert name in ("promtool", "prometheus"), name
    return _install(f"{PROMETHEUS}/{name}", PROMETHEUS_VERSION, name)


def victoria_metrics() -> str:
    """VictoriaMetrics single-node at VICTORIAMETRICS_VERSION: a remote-write receiver."""
    return _install(
        f"{VICTORIAMETRICS}/victoria-metrics", VICTORIAMETRICS_VERSION, "victoria-metrics"
    )


def vmalert() -> str:
    """vmalert at VICTORIAMETRICS_VERSION: evaluates Prometheus rule files against
    VictoriaMetrics, which evaluates none itself."""
    return _install(f"{VICTORIAMETRICS}/vmalert", VICTORIAMETRICS_VERSION, "vmalert")


def _build(name: str, directory: Path) -> str:
    """A Go main of this repository built from its go.mod and go.sum (the module versions
    are pinned there) into TOOLS/name."""
    target = TOOLS / name
    tmp = TOOLS / f"{name}.{os.getpid()}"
    TOOLS.mkdir(parents=True, exist_ok=True)
    _run([_go(), "build", "-trimpath", "-o", str(tmp), "."], cwd=directory)
    tmp.replace(target)
    return str(target)


@functools.cache
def psacheck() -> str:
    """tests/psa, once per test session."""
    return _build("psacheck", ROOT / "tests" / "psa")


@functools.cache
def coredns() -> str:
    """tests/coredns: CoreDNS at the release pinned in its go.mod with only the plugins the
    tests use (acl, bind, cache, dnstap, errors, file, forward, log, metrics), once per test
    session. Debian packages no CoreDNS; the full build takes ten minutes here, this one
    seconds once Go's caches are warm."""
    return _build("coredns", ROOT / "tests" / "coredns")
