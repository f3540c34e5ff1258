"""A container's view of the host, re-created without a container engine: a private mount
namespace and PID namespace in which the host's /proc and /sys (and a resolv.conf) are
bind-mounted read-only under ``<work>/host``, as the DaemonSet's hostPath volumes and the
compose exporter's bind mounts put them under /host; the container's own /proc is bound at
``<work>/podproc``. The command runs as uid and gid 10001 with no capability, like the
image's USER. Root only."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

UID = 10001
ROOT = Path(__file__).resolve().parent.parent.parent


def package_for_pod(work: Path) -> Path:
    """A copy of the dnsfleet package under ``work`` (the directory for PYTHONPATH):
    uid 10001 reads it wherever the checkout is (a clone under a mode-0700 directory, as
    mktemp makes, cannot be entered by that user)."""
    lib = work / "lib"
    if (lib / "dnsfleet").is_dir():
        return lib
    shutil.copytree(
        ROOT / "exporter" / "dnsfleet",
        lib / "dnsfleet",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for d in (lib, *lib.rglob("*")):
        d.chmod(0o755 if d.is_dir() else 0o644)
    return lib


def run_in_pod(
    work: Path, argv: list[str], *, resolv_conf: Path
) -> subprocess.CompletedProcess[str]:
    """``argv`` with ``work`` prepared as above; ``{host}`` and ``{podproc}`` in an argument
    become those paths. ``work`` must be traversable by uid 10001 (not under /root)."""
    host = work / "host"
    args = " ".join(shlex.quote(a.format(host=host, podproc=work / "podproc")) for a in argv)
    script = f"""
set -eu
mkdir -p {host}/proc {host}/sys {host}/etc {work}/podproc
touch {host}/etc/resolv.conf
for m in proc sys; do
    mount --bind /$m {host}/$m
    mount -o remount,bind,ro {host}/$m
done
mount --bind -o ro {resolv_conf} {host}/etc/resolv.conf
mount -t proc proc /proc
mount --bind /proc {work}/podproc
exec setpriv --reuid={UID} --regid={UID} --clear-groups --inh-caps=-all --bounding-set=-all \\
    {args}
"""
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
