"""The published artefacts' recipes, checked without a container engine or GitHub:
.github/workflows/release.yml with actionlint (and shellcheck on its scripts), its actions
pinned by commit and its token's permissions each used by a step; the Dockerfile with
hadolint, against the build context, its base pinned by digest and pip installing the
committed lock with hashes; the image's entry point run with the native binaries as its
USER with the host mounted as compose and the DaemonSet mount it, and the shell scripts
of the Debian package with shellcheck."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet.cli import exporter_parser
from tests.harness import gotools
from tests.harness.hostmounts import package_for_pod, run_in_pod
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
    assert shutil.which("shellcheck"), "shellcheck (tests/needs.txt) checks the run: scripts"
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


# The permissions a job's token may hold, and the actions that need each: a permission
# no step of its job needs is a grant an attacker who takes over any step gets for free.
ATTEST = ("actions/attest", "actions/attest-build-provenance", "actions/attest-sbom")
PERMISSION_USERS: dict[str, tuple[str, ...]] = {
    "contents": ("actions/checkout",),
    "packages": ("docker/build-push-action",),
    "id-token": ATTEST,
    "attestations": ATTEST,
}
# And the other way: what an action cannot work without.
NEEDS: dict[str, dict[str, str]] = {
    **{a: {"id-token": "write", "attestations": "write"} for a in ATTEST},
    "docker/build-push-action": {"packages": "write"},
    "actions/checkout": {"contents": "read"},
}
USES_PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")
FROM_PINNED = re.compile(r"^FROM python:3\.11-slim-bookworm@(sha256:[0-9a-f]{64})(?: AS \w+)?$")


def unpinned_actions(text: str) -> list[str]:
    """`uses:` lines whose action is not a full commit with its release beside it."""
    uses = re.findall(r"^\s*(?:- )?uses:\s*(.*)$", text, re.MULTILINE)
    assert uses, "no uses: line found"
    return [u for u in uses if not USES_PINNED.match(u.strip())]


def permission_problems(wf: dict[Any, Any]) -> list[str]:
    problems = []
    for name, job in wf["jobs"].items():
        granted: dict[str, str] = job.get("permissions", wf.get("permissions"))
        assert isinstance(granted, dict), f"{name}: permissions must be listed, not {granted}"
        actions = {s["uses"].split("@")[0] for s in job["steps"] if "uses" in s}
        for perm, level in granted.items():
            users = set(PERMISSION_USERS.get(perm, ())) & actions
            if level != "none" and not users:
                problems.append(f"{name}: {perm}: {level} and no step uses it")
        for action in actions:
            for perm, level in NEEDS.get(action, {}).items():
                if granted.get(perm) not in (level, "write"):
                    problems.append(f"{name}: {action} needs {perm}: {level}")
    return problems


@pytest.mark.unit
def test_actions_are_pinned_by_commit_and_permissions_used() -> None:
    text = WORKFLOW.read_text()
    assert unpinned_actions(text) == []
    assert permission_problems(_workflow()) == []
    # The checks refuse what they are there for.
    sha = re.search(r"actions/checkout@([0-9a-f]{40}) # v[\d.]+", text)
    assert sha, "actions/checkout is pinned"
    for bad in (
        text.replace(sha.group(0), "actions/checkout@v4", 1),
        text.replace(sha.group(0), f"actions/checkout@{sha.group(1)[:12]} # v4", 1),
        text.replace(sha.group(0), f"actions/checkout@{sha.group(1)}", 1),
    ):
        assert unpinned_actions(bad), bad
    granted = _workflow()
    granted["jobs"]["deb"]["permissions"]["packages"] = "write"
    assert permission_problems(granted) == ["deb: packages: write and no step uses it"]
    dropped = _workflow()
    del dropped["jobs"]["image"]["permissions"]["id-token"]
    assert permission_problems(dropped) == ["image: actions/attest needs id-token: write"]
    unused = _workflow()
    unused["jobs"]["image"]["steps"] = [
        s for s in unused["jobs"]["image"]["steps"] if not s.get("uses", "").startswith(ATTEST)
    ]
    assert sorted(permission_problems(unused)) == [
        "image: attestations: write and no step uses it",
        "image: id-token: write and no step uses it",
    ]


def dockerfile_problems(text: str) -> list[str]:
    """Why a build of ``text`` would not be the same tomorrow: a base image by tag alone, a
    pip install that resolves instead of installing the lock with its hashes."""
    text = text.replace("\\\n", " ")
    problems = []
    froms = re.findall(r"^FROM .*$", text, re.MULTILINE)
    digests = {m.group(1) for f in froms if (m := FROM_PINNED.match(f.strip()))}
    if len(digests) != 1 or any(not FROM_PINNED.match(f.strip()) for f in froms):
        problems.append(f"base images not pinned by one digest: {froms}")
    if "hadolint ignore=DL3013" in text:
        problems.append("an unpinned pip install is excused (DL3013)")
    runs = re.findall(r"^RUN (.*)$", text, re.MULTILINE)
    installs = [c.split() for r in runs for c in r.split("&&") if "pip install" in c]
    locks = [i[i.index("-r") + 1] for i in installs if "-r" in i]
    for args in installs:
        if "-r" in args and "--require-hashes" not in args:
            problems.append(f"{' '.join(args)}: no --require-hashes")
        elif "-r" not in args and not {"--no-deps", "--no-build-isolation"} <= set(args):
            problems.append(f"{' '.join(args)}: resolves dependencies or a build backend")
    if locks != ["requirements/build.txt", "requirements/run.txt"]:
        problems.append(f"installs {locks}, not the build then the run lock")
    return problems


@pytest.mark.unit
def test_dockerfile_is_pinned_base_and_lock() -> None:
    text = DOCKERFILE.read_text()
    assert dockerfile_problems(text) == []
    assert "docker buildx imagetools inspect python:3.11-slim-bookworm" in text  # refresh
    # The image has both extras: run.txt holds re2's and dnstap's modules.
    lock = (ROOT / "requirements" / "run.txt").read_text()
    assert re.search(r"^google-re2==", lock, re.M) and re.search(r"^protobuf==", lock, re.M)
    digest = re.search(r"@(sha256:[0-9a-f]{64}) AS build", text)
    assert digest, "the build stage's base is pinned"
    lines = text.splitlines()
    run_lock = next(x for x in lines if "-r requirements/run.txt" in x)
    no_deps = next(x for x in lines if "--no-build-isolation" in x)
    for bad in (
        text.replace("@" + digest.group(1), "", 1),
        text.replace(digest.group(1), "sha256:" + "0" * 64, 1),  # two stages, two bases
        text.replace("--require-hashes ", "", 1),
        text.replace(run_lock, run_lock.replace("-r requirements/run.txt", "'.[re2,dnstap]'")),
        text.replace(no_deps, no_deps.replace("--no-deps ", "")),
        text.replace(no_deps, no_deps.replace("--no-build-isolation ", "")),
        text.replace("RUN pip", "# hadolint ignore=DL3013\nRUN pip", 1),
    ):
        assert dockerfile_problems(bad), bad


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
    them: the configuration loads and every host collector reads the host."""
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
                f"PYTHONPATH={package_for_pod(work)}",
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
