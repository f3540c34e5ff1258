"""The Debian package as built (`make deb`: debhelper and dh-python from debian/): its
fields, dependencies on Debian's own Python packages, conffiles, contents, and lintian.
Installing it with apt into a chroot of each Debian release is tests/test_packaging.py
(`make test-packaging`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness.debpkg import build_deb

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("dpkg-buildpackage") is None, reason="needs dpkg-dev"),
]
# lintian's warnings that stay, each for a reason (docs/deployment.md):
EXPECTED_LINTIAN: set[str] = set()


@pytest.fixture(scope="module")
def deb() -> Path:
    return build_deb()


def dpkg_deb(*args: str) -> str:
    return subprocess.run(
        ["dpkg-deb", *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def field(deb: Path, name: str) -> str:
    return dpkg_deb("--field", str(deb), name).strip()


def test_architecture_all_on_debians_python_packages(deb: Path) -> None:
    assert field(deb, "Package") == "dnsfleet" and field(deb, "Architecture") == "all"
    version = re.match(r"dnsfleet \(([^)]+)\)", (ROOT / "debian" / "changelog").read_text())
    assert version and field(deb, "Version") == version.group(1)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{version.group(1)}"' in pyproject
    depends = {d.strip().split(" ")[0]: d.strip() for d in field(deb, "Depends").split(",")}
    assert depends["python3:any"] == "python3:any (>= 3.11~)"
    # The versions Debian 12 ships, and the lower bounds pyproject.toml states.
    for pkg, dist, low in (
        ("python3-dnspython", "dnspython", "2.3"),
        ("python3-aiohttp", "aiohttp", "3.8.4"),
        ("python3-yaml", "pyyaml", "6"),
        ("python3-bcrypt", "bcrypt", "3.2.2"),
        ("python3-h2", "h2", "4.1"),
    ):
        assert depends[pkg].startswith(f"{pkg} (>= {low}"), depends[pkg]
        assert f'"{dist}>={low}' in pyproject, dist
    assert {"adduser", "procps"} <= set(depends)
    assert not [d for d in depends if "re2" in d]
    # dnstap (the dnstap extra) works on the package as documented: Debian's module of
    # it is installed with it by default. Debian numbers python3-protobuf as the C++
    # library: 3.21 is the Python module 4.21, the extra's lower bound.
    assert re.search(r'^dnstap = \["protobuf>=4\.21,', pyproject, re.M)
    recommends = {d.strip().split(" ")[0]: d.strip() for d in field(deb, "Recommends").split(",")}
    dnstap = {**depends, **recommends}.get("python3-protobuf", "")
    assert dnstap.startswith("python3-protobuf (>= 3.21"), (depends, recommends)
    # /metrics gzip on ISA-L: recommended, as Debian 12 has no python3-isal (zlib there).
    assert recommends.get("python3-isal") == "python3-isal (>= 1.7.2)", recommends
    assert "python3-isal" not in depends
    assert '"isal>=1.7.2,' in pyproject
    # The event loop on uvloop: recommended, asyncio's own loop without it.
    assert recommends.get("python3-uvloop") == "python3-uvloop (>= 0.17)", recommends
    assert '"uvloop>=0.17,' in pyproject


def test_contents(deb: Path) -> None:
    assert dpkg_deb("--info", str(deb), "conffiles").split() == [
        "/etc/default/dnsfleet-exporter",
        "/etc/dnsfleet/dnsfleet.yml",
    ]
    lines = dpkg_deb("--contents", str(deb)).splitlines()
    paths = {line.split()[-1].removeprefix(".") for line in lines}
    for path in (
        "/usr/bin/dnsfleet-exporter",
        "/usr/bin/dnsfleet",
        "/lib/systemd/system/dnsfleet-exporter.service",
        "/etc/dnsfleet/dnsfleet.yml",
        "/etc/default/dnsfleet-exporter",
        "/usr/lib/python3/dist-packages/dnsfleet/cli.py",
        "/usr/share/man/man1/dnsfleet-exporter.1.gz",
        "/usr/share/doc/dnsfleet/docs/deployment.md",
    ):
        assert path in paths, path
    # Pure Python, byte-compiled at install (py3compile), no bundled dependency.
    assert not [p for p in paths if p.endswith((".pyc", ".so"))]
    site = "/usr/lib/python3/dist-packages/"
    tops = {p.removeprefix(site).split("/")[0] for p in paths if p.startswith(site + "d")}
    assert tops == {"dnsfleet", "dnsfleet-" + field(deb, "Version") + ".dist-info"}, tops
    assert all(" root/root " in line for line in lines)
    # The console scripts run Debian's python3, not a build machine's interpreter.
    script = subprocess.run(
        ["sh", "-c", f"dpkg-deb --fsys-tarfile {deb} | tar -xO ./usr/bin/dnsfleet-exporter"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert script.startswith("#! /usr/bin/python3\n") or script.startswith("#!/usr/bin/python3\n")


LINK = re.compile(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)")  # relative: no scheme, no bare anchor


def test_readme_links_into_docs_resolve_where_the_package_installs_them(deb: Path) -> None:
    """README.md's documents are in the package (debian/dnsfleet.docs), under the names
    and layout its links and theirs name, uncompressed: a link followed in
    /usr/share/doc/dnsfleet reaches the file."""
    listed = (ROOT / "debian" / "dnsfleet.docs").read_text().split()
    linked = sorted(set(LINK.findall((ROOT / "README.md").read_text())))
    into_docs = [link for link in linked if link.startswith("docs/")]
    assert {"docs/configuration.md", "docs/metrics.md", "docs/deployment.md"} <= set(into_docs)
    for link in into_docs:
        assert link in listed or "docs" in listed, f"{link}: not in debian/dnsfleet.docs"
    doc = "/usr/share/doc/dnsfleet/"
    paths = {
        line.split()[-1].removeprefix("./" + doc[1:])
        for line in dpkg_deb("--contents", str(deb)).splitlines()
    }
    assert "README.md" in paths
    # Every link from the README or a shipped document to README.md or into docs/ (links
    # into the repository's alerts/, which the package does not carry, are left aside).
    sources = ["README.md", *sorted(p for p in paths if re.fullmatch(r"docs/.*\.md", p))]
    for source in sources:
        for link in LINK.findall((ROOT / source).read_text()):
            target = os.path.normpath(Path(source).parent / link)
            if target == "README.md" or target.startswith("docs/"):
                assert target in paths, f"{source}: {link} -> {doc}{target}: not installed"


def test_lintian(deb: Path) -> None:
    out = subprocess.run(
        ["lintian", "--pedantic", "--fail-on", "error", str(deb)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    tags = {line for line in out.stdout.splitlines() if re.match(r"[EWIPX]: ", line)}
    errors = sorted(t for t in tags if t.startswith("E: "))
    assert out.returncode == 0 and not errors, out.stdout + out.stderr
    warnings = {t for t in tags if t.startswith("W: ")}
    assert warnings == EXPECTED_LINTIAN, sorted(warnings)
