"""The Debian package (`make deb`): built with dpkg-deb, inspected, then installed with
dpkg into a throwaway root: an overlay of this machine's / in a private mount namespace
(unshare), so dpkg, adduser and the maintainer scripts run for real and nothing reaches the
host. There the exporter runs from the package as its dedicated user and is scraped.

Needs root (mount namespaces, chroot): skipped elsewhere."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare, chroot)"),
]


@pytest.fixture(scope="module")
def deb() -> Path:
    out = subprocess.run(
        [str(ROOT / "packaging" / "deb" / "build.sh")],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    path = ROOT / out.stdout.strip().splitlines()[-1]
    assert path.is_file()
    return path


def dpkg_deb(*args: str) -> str:
    return subprocess.run(
        ["dpkg-deb", *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_package_metadata(deb: Path) -> None:
    info = dpkg_deb("--info", str(deb))
    assert "Package: dnsfleet" in info and "Depends: python3 (>= 3.11)" in info
    assert "adduser" in info
    assert dpkg_deb("--info", str(deb), "conffiles").split() == [
        "/etc/dnsfleet/dnsfleet.yml",
        "/etc/default/dnsfleet-exporter",
    ]
    contents = dpkg_deb("--contents", str(deb))
    for path in (
        "./usr/bin/dnsfleet-exporter",
        "./usr/bin/dnsfleet",
        "./lib/systemd/system/dnsfleet-exporter.service",
        "./etc/dnsfleet/dnsfleet.yml",
        "./etc/default/dnsfleet-exporter",
        "./usr/lib/dnsfleet/site-packages/dnsfleet/cli.py",
    ):
        assert path in contents, path
    # Every file root-owned (dpkg-deb --root-owner-group).
    assert all(" root/root " in line for line in contents.splitlines())


@pytest.fixture(scope="module")
def installed(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Install, start, scrape, remove, purge in the throwaway root; yield its upper layer
    (every file the package and the run wrote)."""
    work = tmp_path_factory.mktemp("deb-root")
    upper, lower_work, merged = work / "upper", work / "work", work / "merged"
    for d in (upper, lower_work, merged):
        d.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = f"""
set -eu
mount -t overlay overlay -o lowerdir=/,upperdir={upper},workdir={lower_work} {merged}
for d in proc sys dev; do mount --rbind /$d {merged}/$d; done
cp {deb} {merged}/tmp/dnsfleet.deb
# Only loopback for the stub collector: never this machine's own resolver.
rm -f {merged}/etc/resolv.conf
printf 'nameserver 127.0.0.1\\noptions timeout:1 attempts:1\\n' > {merged}/etc/resolv.conf
chroot {merged} /bin/sh -eu -c '
out=/tmp/dnsfleet-deb
mkdir -p $out
dpkg -i /tmp/dnsfleet.deb > $out/dpkg-install.log 2>&1
getent passwd dnsfleet > $out/passwd
stat -c "%U %a" /var/lib/dnsfleet > $out/statedir
/usr/bin/dnsfleet-exporter --config.file=/etc/dnsfleet/dnsfleet.yml --config.check \\
    > $out/config-check 2>&1
systemd-analyze verify /lib/systemd/system/dnsfleet-exporter.service \\
    > $out/verify 2>&1 || echo "rc=$?" >> $out/verify
setpriv --reuid=dnsfleet --regid=dnsfleet --clear-groups \\
    /usr/bin/dnsfleet-exporter --config.file=/etc/dnsfleet/dnsfleet.yml \\
    --web.listen-address=127.0.0.1:{port} > $out/exporter.log 2>&1 &
pid=$!
i=0
until curl -fsS http://127.0.0.1:{port}/-/ready > /dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 100 ] || break; sleep 0.1
done
curl -fsS http://127.0.0.1:{port}/metrics > $out/metrics
ps -o user= -p $pid > $out/user
kill $pid; wait $pid || true
dpkg -r dnsfleet > $out/dpkg-remove.log 2>&1
test -f /etc/dnsfleet/dnsfleet.yml && echo kept > $out/conffile-after-remove
dpkg -P dnsfleet > $out/dpkg-purge.log 2>&1
test -e /etc/dnsfleet/dnsfleet.yml || echo gone > $out/conffile-after-purge
'
"""
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    out = upper / "tmp" / "dnsfleet-deb"
    logs = (
        "".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(out.glob("*")))
        if out.is_dir()
        else ""
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + logs
    yield out


def test_installs_runs_as_its_user_and_is_scraped(installed: Path) -> None:
    assert installed.joinpath("passwd").read_text().startswith("dnsfleet:")
    assert "warning" not in installed.joinpath("dpkg-install.log").read_text().lower()
    assert installed.joinpath("statedir").read_text().split() == ["dnsfleet", "755"]
    assert "configuration valid" in installed.joinpath("config-check").read_text()
    assert installed.joinpath("user").read_text().strip() == "dnsfleet"
    metrics = installed.joinpath("metrics").read_text()
    assert "dnsfleet_build_info{" in metrics
    # The packaged default: this host's resolv.conf (loopback here) and host collectors.
    assert "dnsfleet_stub_nameservers{" in metrics
    assert 'dnsfleet_collector_success{collector="nic"} 1' in metrics


def test_unit_verifies(installed: Path) -> None:
    text = installed.joinpath("verify").read_text()
    assert "rc=" not in text, text


def test_remove_keeps_the_conffile_purge_removes_it(installed: Path) -> None:
    assert installed.joinpath("conffile-after-remove").read_text().strip() == "kept"
    assert installed.joinpath("conffile-after-purge").read_text().strip() == "gone"
