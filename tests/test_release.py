"""The published artefacts' recipes, checked without a container engine or GitHub:
.github/workflows/release.yml with actionlint (and shellcheck on its scripts), the
Dockerfile with hadolint and against the build context, the image's entry point run with
the native binaries as its USER with the host mounted as compose and the DaemonSet mount
it, and the shell scripts of the Debian package with shellcheck."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet.cli import exporter_parser
from tests.harness import gotools
from tests.harness.hostmounts import run_in_pod
from tests.harness.metrics import samples, value

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
DOCKERFILE = ROOT / "exporter" / "Dockerfile"
SHELL_SCRIPTS = [
    ROOT / "packaging" / "build-deb.sh",
    *sorted((ROOT / "tests" / "packaging").glob("*.sh")),
    *sorted((ROOT / "debian").glob("dnsfleet.*inst")),
    *sorted((ROOT / "debian").glob("dnsfleet.*rm")),
]


def actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [gotools.actionlint(), "-no-color", "-oneline", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.integration
def test_release_workflow_passes_actionlint() -> None:
    assert shutil.which("shellcheck"), "shellcheck (TEST_DEBS) checks the run: scripts"
    out = actionlint(WORKFLOW)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_actionlint_refuses_a_broken_workflow(tmp_path: Path) -> None:
    text = WORKFLOW.read_text()
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        text.replace("github.ref_name", "github.ref_nam").replace(
            "runs-on: ubuntu-latest", "runs-on: ubuntu-latest-but-no", 1
        )
    )
    out = actionlint(bad)
    assert out.returncode == 1, out.stdout
    assert "ref_nam" in out.stdout and "ubuntu-latest-but-no" in out.stdout, out.stdout


def _workflow() -> dict[Any, Any]:
    wf: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    return wf


@pytest.mark.unit
def test_release_builds_multi_arch_images_with_sbom_and_provenance_on_a_tag() -> None:
    wf = _workflow()
    assert wf[True] == {"push": {"tags": ["v*.*.*"]}}  # YAML 1.1: `on` is True
    job = wf["jobs"]["image"]
    assert job["permissions"]["packages"] == "write"
    steps = {s.get("uses", "").split("@")[0]: s for s in job["steps"]}
    build = steps["docker/build-push-action"]["with"]
    assert build["file"] == "exporter/Dockerfile" and build["context"] == "."
    assert build["platforms"] == "linux/amd64,linux/arm64"
    assert build["push"] is True and build["sbom"] is True
    assert build["provenance"] == "mode=max"
    meta = steps["docker/metadata-action"]["with"]
    assert meta["images"] == "ghcr.io/${{ github.repository_owner }}/dnsfleet-exporter"
    assert "type=semver,pattern={{version}}" in meta["tags"]  # v0.2.0 -> 0.2.0
    assert steps["docker/login-action"]["with"]["registry"] == "ghcr.io"
    assert "docker/setup-qemu-action" in steps  # arm64 on an amd64 runner
    # The tag must be the version the sources carry (and the manifests reference).
    check = next(s for s in job["steps"] if s.get("name", "").startswith("The tag is"))
    assert "pyproject.toml" in check["run"] and "debian/changelog" in check["run"]


@pytest.mark.integration
def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    bad = subprocess.run(
        [str(hadolint), "--no-color", "-"],
        input="FROM python:latest\nRUN cd /src && pip install .\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "DL3007" in bad.stdout and "DL3003" in bad.stdout, bad.stdout


@pytest.mark.unit
def test_dockerfile_copies_what_exists_in_the_context() -> None:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    stages = re.findall(r"^FROM \S+(?: AS (\S+))?", text, re.MULTILINE)
    assert len(stages) == 2 and stages[0] == "build"
    for line in re.findall(r"^COPY (.*)$", text, re.MULTILINE):
        args = line.split()
        if args[0].startswith("--from="):
            assert args[0].removeprefix("--from=") in stages, line
            continue
        for src in args[:-1]:
            assert (ROOT / src).exists(), f"COPY {src}: not in the build context"
    # Both architectures: the base image is a multi-arch official image and nothing
    # compiles (every dependency has manylinux wheels for x86_64 and aarch64).
    assert all(f.startswith("FROM python:3.11-slim-") for f in re.findall(r"^FROM \S+", text, re.M))


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount and PID namespaces)")
def test_image_entrypoint_runs_natively_as_its_user(tmp_path: Path) -> None:
    """ENTRYPOINT and CMD of the image, run with the native interpreter as the image's
    USER (10001, no capability) with the host's /proc and /sys at /host as compose mounts
    them: the configuration loads and every host collector reads the host.

    The interpreter is Debian's (the venv's may live where uid 10001 cannot read, under
    /root); the packages are the venv's, the lock's versions that the image installs, so
    the test needs no Python package of Debian's."""
    native = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    if [int(v) for v in native] != list(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {'.'.join(native)}: the venv's packages are not its")
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    entry = json.loads(re.search(r"^ENTRYPOINT (.*)$", text, re.M).group(1))  # type: ignore[union-attr]
    cmd = json.loads(re.search(r"^CMD (.*)$", text, re.M).group(1))  # type: ignore[union-attr]
    user = re.findall(r"^USER (\S+)", text, re.M)[-1]
    assert entry == ["dnsfleet-exporter"] and user == "10001:10001"
    args = exporter_parser().parse_args(cmd)
    work = Path(tempfile.mkdtemp(prefix="dnsfleet-image-"))
    try:
        work.chmod(0o755)
        (work / "resolv.conf").write_text("nameserver 127.0.0.153\n")
        (work / "dnsfleet.yml").write_text("resolv_conf: [/etc/resolv.conf]\ntargets: []\n")
        argv = [
            a.replace("/host", "{host}").replace(args.config_file, str(work / "dnsfleet.yml"))
            for a in cmd
            if not a.startswith("--web.listen-address")
        ]
        out = run_in_pod(
            work,
            [
                "env",
                f"PYTHONPATH={ROOT / 'exporter'}:{sysconfig.get_path('platlib')}",
                "/usr/bin/python3",
                "-c",
                "import sys; from dnsfleet.cli import exporter_main; sys.exit(exporter_main())",
                *argv,
                "--once",
            ],
            resolv_conf=work / "resolv.conf",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    got = samples(out.stdout)
    for c in ("stub", "nic", "bonding", "cpu_latency"):
        assert value(got, "dnsfleet_collector_success", collector=c) == 1, c


@pytest.mark.integration
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_pass_shellcheck(script: Path) -> None:
    text = script.read_text().replace("#DEBHELPER#", "")
    out = subprocess.run(
        ["shellcheck", "--shell=" + ("bash" if "bash" in text.splitlines()[0] else "sh"), "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout
