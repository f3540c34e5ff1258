"""A network namespace with its own loopback and four kinds of nameserver on port 53, for
running real clients (glibc's getent, the exporter) against resolv.conf files that can only
name an address, never a port:

    127.0.0.1  unbound, answering (a.local.test. A 192.0.2.1)
    127.0.0.2  a socket that takes every datagram and connection and never answers
    127.0.0.3  nothing listening: ICMP port unreachable / TCP RST
    127.0.0.4  unbound with access-control refuse: answers rcode REFUSED

Nothing here touches the host's network or its resolv.conf: every client runs in the
namespace with its own resolv.conf bind-mounted over /etc/resolv.conf in a private mount
namespace (``unshare -m``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness.process import terminate
from tests.harness.servers import Unbound
from tests.harness.tools import binary

ANSWERING, SILENT, CLOSED, RCODE_REFUSED = "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"
QUERY_NAME = "a.local.test."

BLACKHOLE_SCRIPT = """
import socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((sys.argv[1], 53))
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((sys.argv[1], 53))
t.listen(512)
print("ready", flush=True)
time.sleep(600)
"""


def netns_available() -> str | None:
    """None when the lab can run here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root for ip netns and mount namespaces (CI runs as root)"
    for tool in ("ip", "unshare", "getent"):
        if shutil.which(tool) is None and not os.access(f"/usr/sbin/{tool}", os.X_OK):
            return f"{tool} is not installed"
    probe = f"dnsfleet-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class NetLab:
    name: str
    workdir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def exec_args(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *args]

    def client_command(self, resolv_conf: Path, command: str) -> list[str]:
        """``command`` (shell) in the namespace with ``resolv_conf`` as /etc/resolv.conf
        and DNS as the only hosts source. Prints ``<start> <end> <rc>`` (wall clock from
        just before to just after the command) as its last line."""
        nss = self.workdir / "nsswitch.conf"
        script = (
            f"mount --bind {shlex.quote(str(resolv_conf))} /etc/resolv.conf && "
            f"mount --bind {shlex.quote(str(nss))} /etc/nsswitch.conf && "
            f"s=$(date +%s.%N); {command}; rc=$?; e=$(date +%s.%N); "
            'echo "TIMING $s $e $rc"'
        )
        return self.exec_args(
            binary("unshare"), "-m", "--propagation", "private", "sh", "-c", script
        )

    def start(self) -> NetLab:
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        subprocess.run(self.exec_args("ip", "link", "set", "lo", "up"), check=True)
        # getaddrinfo's AI_ADDRCONFIG (getent ahosts sets it) skips IPv4 lookups when the
        # host has no IPv4 address besides 127/8: give the namespace one (TEST-NET-1, on
        # its own loopback, reachable from nowhere).
        subprocess.run(
            self.exec_args("ip", "addr", "add", "192.0.2.254/32", "dev", "lo"), check=True
        )
        (self.workdir / "nsswitch.conf").write_text("hosts: dns\n")
        for host, extra in (
            (ANSWERING, ""),
            (RCODE_REFUSED, "  access-control: 127.0.0.0/8 refuse"),
        ):
            u = Unbound(
                self.workdir / f"unbound-{host}",
                host=host,
                port=53,
                local_data=["a.local.test. 300 IN A 192.0.2.1"],
                extra_server=extra,
            )
            conf = u.write_config()
            log = open(u.workdir / "unbound.stderr", "ab")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(
                    self.exec_args(binary("unbound"), "-d", "-c", str(conf)), stdout=log, stderr=log
                )
            )
        bh = subprocess.Popen(
            self.exec_args(sys.executable, "-c", BLACKHOLE_SCRIPT, SILENT), stdout=subprocess.PIPE
        )
        self.procs.append(bh)
        assert bh.stdout is not None
        if bh.stdout.readline().strip() != b"ready":
            raise RuntimeError("blackhole did not start")
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        rc = self.workdir / "ready.resolv.conf"
        rc.write_text(f"nameserver {ANSWERING}\noptions timeout:1 attempts:1\n")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = subprocess.run(
                self.client_command(rc, f"getent ahostsv4 {QUERY_NAME}"),
                capture_output=True,
                text=True,
                timeout=30,
            )
            if "192.0.2.1" in r.stdout:
                return
            time.sleep(0.1)
        logs = "".join(
            p.read_text()[-1500:] for p in self.workdir.glob("*/unbound*") if p.is_file()
        )
        raise RuntimeError(f"unbound in namespace {self.name} never answered:\n{logs}")

    def stop(self) -> None:
        for p in self.procs:
            terminate(p, timeout=10)
        self.procs.clear()
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


@contextlib.contextmanager
def netlab(workdir: Path) -> Iterator[NetLab]:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    lab = NetLab(f"dnsfleet-stub-{os.getpid()}-{time.monotonic_ns() % 100000}", workdir)
    try:
        yield lab.start()
    finally:
        lab.stop()
