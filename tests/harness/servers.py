"""Real DNS servers and scripted peers for tests, all on loopback with their own config in a
temp dir: unbound, BIND (named), a blackhole socket and a scripted UDP/TCP responder."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset

from tests.harness.process import Daemon, ManagedProcess
from tests.harness.tools import binary, free_port


def wait_dns(
    host: str,
    port: int,
    name: str = ".",
    qtype: str = "SOA",
    *,
    timeout: float = 15.0,
    tcp: bool = False,
) -> None:
    """Wait until the server answers anything at all."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            q = dns.message.make_query(name, qtype)
            if tcp:
                dns.query.tcp(q, host, port=port, timeout=0.5)
            else:
                dns.query.udp(q, host, port=port, timeout=0.5)
            return
        except Exception as e:
            last = e
            time.sleep(0.05)
    raise RuntimeError(f"DNS server {host}:{port} did not answer within {timeout}s: {last}")


ZONE_TEMPLATE = """$TTL {ttl}
@   IN SOA ns1.{zone}. hostmaster.{zone}. ( {serial} 3600 600 86400 {ttl} )
    IN NS  ns1.{zone}.
ns1 IN A   127.0.0.1
{records}
"""


@dataclass
class Named(Daemon):
    """BIND 9, authoritative for test zones, with the statistics channel on."""

    workdir: Path
    zones: dict[str, str] = field(default_factory=dict)  # zone -> extra records
    ttl: int = 60
    host: str = "127.0.0.1"
    port: int = 0
    stats_port: int = 0
    extra_options: str = ""
    recursion: bool = False  # a resolver (with `forwarders` in extra_options) when True

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.stats_port = self.stats_port or free_port()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def stats_url(self) -> str:
        return f"http://127.0.0.1:{self.stats_port}"

    def write_config(self) -> Path:
        zone_stanzas = []
        for zone, records in self.zones.items():
            zf = self.workdir / f"{zone}.zone"
            zf.write_text(
                ZONE_TEMPLATE.format(
                    zone=zone, ttl=self.ttl, records=records, serial=int(time.time())
                )
            )
            zone_stanzas.append(f'zone "{zone}" {{ type primary; file "{zf}"; }};')
        conf = self.workdir / "named.conf"
        conf.write_text(f"""
options {{
    directory "{self.workdir}";
    listen-on port {self.port} {{ {self.host}; }};
    listen-on-v6 {{ none; }};
    pid-file "{self.workdir}/named.pid";
    session-keyfile "{self.workdir}/session.key";
    recursion {"yes" if self.recursion else "no"};
    allow-query {{ any; }};
    dnssec-validation no;
    notify no;
    {self.extra_options}
}};
controls {{ }};
statistics-channels {{ inet 127.0.0.1 port {self.stats_port} allow {{ 127.0.0.1; }}; }};
{chr(10).join(zone_stanzas)}
""")
        return conf

    def start(self) -> Named:
        conf = self.write_config()
        self.managed = ManagedProcess(
            [binary("named"), "-g", "-c", str(conf), "-n", "1"],
            self.workdir / "named.log",
            what="named",
        )
        first_zone = next(iter(self.zones), "version.bind")
        try:
            wait_dns(self.host, self.port, first_zone, "SOA" if self.zones else "TXT")
        except RuntimeError:
            self.stop()
            raise RuntimeError(
                "named did not start:\n" + (self.workdir / "named.log").read_text()[-3000:]
            ) from None
        return self


@dataclass
class Unbound(Daemon):
    """unbound on loopback, remote control on a unix socket, extended statistics on."""

    workdir: Path
    host: str = "127.0.0.1"
    port: int = 0
    # stub zones: name -> "127.0.0.1@port"
    stubs: dict[str, str] = field(default_factory=dict)
    local_data: list[str] = field(default_factory=list)
    extra_server: str = ""
    extended_statistics: bool = True
    env: dict[str, str] = field(default_factory=dict)  # e.g. libfaketime's LD_PRELOAD
    extra_config: str = ""  # top-level clauses after the others (e.g. `dnstap:`)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def control_socket(self) -> Path:
        return self.workdir / "unbound.ctl"

    @property
    def conf_path(self) -> Path:
        return self.workdir / "unbound.conf"

    def write_config(self) -> Path:
        local = "\n".join(f'  local-data: "{d}"' for d in self.local_data)
        stubs = "\n".join(
            f'stub-zone:\n  name: "{name}"\n  stub-addr: {addr}\n'
            for name, addr in self.stubs.items()
        )
        self.conf_path.write_text(f"""
server:
  interface: {self.host}
  port: {self.port}
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{self.workdir}"
  pidfile: ""
  use-syslog: no
  logfile: "{self.workdir}/unbound.log"
  verbosity: 1
  num-threads: 1
  do-not-query-localhost: no
  module-config: "iterator"
  extended-statistics: {"yes" if self.extended_statistics else "no"}
  statistics-cumulative: no
  local-zone: "test." nodefault
  local-zone: "local.test." static
{local}
{self.extra_server}
remote-control:
  control-enable: yes
  control-interface: "{self.control_socket}"
  control-use-cert: no
{stubs}
{self.extra_config}
""")
        return self.conf_path

    def start(self) -> Unbound:
        conf = self.write_config()
        self.managed = ManagedProcess(
            [binary("unbound"), "-d", "-c", str(conf)],
            self.workdir / "unbound.stderr",
            what="unbound",
            env=self.env or None,
        )
        try:
            wait_dns(self.host, self.port, "local.test.", "SOA")
        except RuntimeError:
            self.stop()
            text = ""
            for f in ("unbound.stderr", "unbound.log"):
                with contextlib.suppress(OSError):
                    text += (self.workdir / f).read_text()[-2000:]
            raise RuntimeError(f"unbound did not start:\n{text}") from None
        return self

    def control(self, *args: str) -> str:
        out = subprocess.run(
            [binary("unbound-control"), "-c", str(self.conf_path), *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        return out.stdout


class Blackhole:
    """A UDP (and TCP) port that accepts and never answers: a silently dropping server."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        # Other tests and helpers bind ports concurrently: retry until UDP and TCP both fit.
        for attempt in range(50):
            p = port or free_port(host=host)
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                udp.bind((host, p))
                tcp.bind((host, p))
            except OSError:
                udp.close()
                tcp.close()
                if port or attempt == 49:
                    raise
                continue
            break
        self.udp, self.tcp = udp, tcp
        self.host, self.port = host, p
        self.tcp.listen(64)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self.udp.close()
        self.tcp.close()


Handler = Callable[[bytes], list[bytes]]


class ScriptedServer:
    """The one hand-written DNS test server: UDP and TCP on one loopback port, replies
    computed by ``handler(query_wire)`` (``tcp_handler`` over TCP, if given): each returned
    bytes object is sent as is (over TCP ``tcp_raw`` decides whether the handler writes its
    own framing). For garbage, wrong IDs, truncation, wrong answers, and the Consul double."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        tcp_raw: bool = False,
        tcp_handler: Handler | None = None,
        port: int | None = None,
        udp_delay: float = 0.0,
    ) -> None:
        self.handler = handler
        self.udp_delay = udp_delay
        self.tcp_handler = tcp_handler or handler
        self.tcp_raw = tcp_raw
        self.port = free_port() if port is None else port
        self.host = host
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((host, self.port))
        self.udp.settimeout(0.2)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((host, self.port))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.received = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._serve_udp, daemon=True),
            threading.Thread(target=self._serve_tcp, daemon=True),
        ]
        for t in self._threads:
            t.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _serve_udp(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.udp.recvfrom(65535)
            except (TimeoutError, OSError):
                continue
            self.received += 1
            replies = self.handler(data)
            if self.udp_delay:
                threading.Timer(self.udp_delay, self._send, (replies, peer)).start()
            else:
                self._send(replies, peer)

    def _send(self, replies: list[bytes], peer: tuple[str, int]) -> None:
        for reply in replies:
            with contextlib.suppress(OSError):
                self.udp.sendto(reply, peer)

    def _serve_tcp(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._tcp_conn, args=(conn,), daemon=True).start()

    def _tcp_conn(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                n = int.from_bytes(_recv_exact(conn, 2), "big")
                data = _recv_exact(conn, n)
            except OSError:
                return
            self.received += 1
            for reply in self.tcp_handler(data):
                framed = reply if self.tcp_raw else len(reply).to_bytes(2, "big") + reply
                with contextlib.suppress(OSError):
                    conn.sendall(framed)
            # Hold the connection open a little so the client reads before EOF.
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self.udp.close()
        self.tcp.close()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise OSError("eof")
        buf += chunk
    return buf


def answer(
    query_wire: bytes, *records: str, rcode: int = 0, tc: bool = False, qid: int | None = None
) -> bytes:
    """Build a reply to ``query_wire`` with ``records`` ("name ttl IN A 1.2.3.4")."""
    q = dns.message.from_wire(query_wire)
    r = dns.message.make_response(q)
    r.set_rcode(dns.rcode.Rcode(rcode))
    for rec in records:
        name, ttl, rdclass, rdtype, rdata = rec.split(maxsplit=4)
        rrset = dns.rrset.from_text(name, int(ttl), rdclass, rdtype, rdata)
        r.answer.append(rrset)
    if tc:
        r.flags |= dns.flags.TC
    if qid is not None:
        r.id = qid
    return r.to_wire()


@contextlib.contextmanager
def scripted(handler: Handler, **kw: object) -> Iterator[ScriptedServer]:
    s = ScriptedServer(handler, **kw)  # type: ignore[arg-type]
    try:
        yield s
    finally:
        s.close()


def is_root() -> bool:
    return os.geteuid() == 0


__all__ = [
    "Blackhole",
    "Named",
    "ScriptedServer",
    "Unbound",
    "answer",
    "dns",
    "is_root",
    "scripted",
    "wait_dns",
]
