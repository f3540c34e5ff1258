"""A loopback lab that makes every resolver statistic move: one authoritative BIND with a
signed zone (secure answers), a signed zone broken after signing (bogus), an unsigned
wildcard zone (cache misses, insecure), a zone the dnsdist rule drops, a blackhole for
upstream timeouts, and one bounded dnsperf run of a fixed query mix. The resolvers under
test reach only these (stub or forward zones, no root hints in use), and trust the two
signed zones through configured DS records."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self, TypeVar

from tests.harness.process import Daemon, ManagedProcess
from tests.harness.servers import wait_dns
from tests.harness.tools import binary, free_port

SIGNED = ("example.test", "bogus.test")
UNSIGNED = ("insecure.test", "drop.test")
T = TypeVar("T")
RRL_SOURCE = "127.0.0.3"  # BindResolver rate-limits this client (5 responses/s)

ZONES = {
    "example.test": """www  IN A   127.0.0.10
www  IN AAAA ::1
www  IN TXT "hello"
www  IN HTTPS 1 . alpn=h2
@    IN MX  10 mail.example.test.
mail IN A   127.0.0.11
_sip._udp IN SRV 10 5 5060 www.example.test.
@    IN CAA 0 issue "example.test"
alias IN CNAME www.example.test.
""",
    "bogus.test": "www  IN A   127.0.0.20\n",
    "insecure.test": "*    IN A   127.0.0.30\n",
    "drop.test": "*    IN A   127.0.0.40\n",
}

HEAD = """$TTL 300
@    IN SOA ns1.{zone}. hostmaster.{zone}. ( {serial} 3600 600 86400 60 )
     IN NS  ns1.{zone}.
ns1  IN A   127.0.0.1
"""


def _run(*cmd: str, cwd: Path) -> str:
    out = subprocess.run(
        list(cmd), cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, f"{' '.join(cmd)}: {out.stderr}"
    return out.stdout


def sign_zones(workdir: Path) -> dict[str, str]:
    """Write the zone files (the signed ones signed with one ECDSA key each, bogus.test
    changed after signing); returns zone -> its DS ("keytag alg digesttype HEX")."""
    workdir.mkdir(parents=True, exist_ok=True)
    serial = int(time.time())
    ds: dict[str, str] = {}
    for zone, records in ZONES.items():
        path = workdir / f"{zone}.zone"
        path.write_text(HEAD.format(zone=zone, serial=serial) + records)
        if zone not in SIGNED:
            continue
        key = _run(
            binary("dnssec-keygen"),
            "-q",
            "-a",
            "ECDSAP256SHA256",
            "-f",
            "KSK",
            "-n",
            "ZONE",
            zone,
            cwd=workdir,
        ).strip()
        with path.open("a") as f:
            f.write((workdir / f"{key}.key").read_text())
        _run(
            binary("dnssec-signzone"),
            "-q",
            "-z",
            "-o",
            zone,
            "-f",
            f"{zone}.signed",
            path.name,
            key,
            cwd=workdir,
        )
        line = _run(binary("dnssec-dsfromkey"), "-2", f"{key}.key", cwd=workdir).split()
        ds[zone] = " ".join(line[3:6]) + " " + "".join(line[6:])
    signed = workdir / "bogus.test.signed"
    # Same signatures, another address: every answer from bogus.test fails validation.
    signed.write_text(signed.read_text().replace("127.0.0.20", "127.0.0.120"))
    return ds


def zone_file(workdir: Path, zone: str) -> Path:
    return workdir / (f"{zone}.signed" if zone in SIGNED else f"{zone}.zone")


def options_head(workdir: Path, port: int) -> str:
    """The first lines of a lab named's options: its directory, one loopback port."""
    return f"""    directory "{workdir}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    pid-file "{workdir}/named.pid";
    session-keyfile "{workdir}/session.key";"""


def spawn_named(conf: Path, what: str, port: int, name: str, qtype: str) -> ManagedProcess:
    """named on ``conf`` in the foreground, once it answers ``name``/``qtype``."""
    managed = ManagedProcess(
        [binary("named"), "-g", "-c", str(conf), "-n", "1"], conf.parent / "named.log", what=what
    )
    try:
        wait_dns("127.0.0.1", port, name, qtype)
    except RuntimeError:
        managed.stop(timeout=10)
        raise RuntimeError(f"{what} did not start:\n{managed.output()}") from None
    return managed


@dataclass
class AuthServer(Daemon):
    """BIND authoritative for the lab zones."""

    port: int = 0
    ds: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.ds = sign_zones(self.workdir)
        self.port = self.port or free_port()
        zones = "\n".join(
            f'zone "{z}" {{ type primary; file "{zone_file(self.workdir, z)}"; }};' for z in ZONES
        )
        conf = self.workdir / "named.conf"
        conf.write_text(f"""
options {{
{options_head(self.workdir, self.port)}
    recursion no;
    allow-query {{ any; }};
    notify no;
}};
controls {{ }};
{zones}
""")
        self.managed = spawn_named(
            conf, "named (lab authoritative)", self.port, "example.test", "SOA"
        )
        return self


@dataclass
class BindResolver(Daemon):
    """BIND as a validating resolver: forward-only zones to the lab, trust anchors for the
    two signed zones only (no root anchor: everything else is insecure), response rate
    limiting for one client (RRL_SOURCE) so that RRL drops are counted, the statistics
    channel on."""

    forwards: dict[str, str] = field(default_factory=dict)  # zone -> "127.0.0.1:port"
    ds: dict[str, str] = field(default_factory=dict)
    port: int = 0
    stats_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def stats_url(self) -> str:
        return f"http://127.0.0.1:{self.stats_port}"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "named.pid"

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.stats_port = self.stats_port or free_port()
        fwd = "\n".join(
            f'zone "{z}" {{ type forward; forward only; forwarders {{ {a.split(":")[0]} '
            f"port {a.split(':')[1]}; }}; }};"
            for z, a in self.forwards.items()
        )
        anchors = "\n".join(
            f'  "{z}." static-ds {d.split()[0]} {d.split()[1]} {d.split()[2]} "{d.split()[3]}";'
            for z, d in self.ds.items()
        )
        conf = self.workdir / "named.conf"
        conf.write_text(f"""
options {{
{options_head(self.workdir, self.port)}
    recursion yes;
    allow-query {{ 127.0.0.0/8; }};
    allow-recursion {{ 127.0.0.1; {RRL_SOURCE}; }};
    dnssec-validation yes;
    notify no;
    resolver-query-timeout 1;
    stale-answer-enable yes;
    stale-cache-enable yes;
    // Rate limiting for one client only (RRL_SOURCE): the load itself is exempt.
    rate-limit {{ responses-per-second 5; ipv4-prefix-length 32;
                 exempt-clients {{ 127.0.0.1; }}; }};
}};
trust-anchors {{
{anchors}
}};
controls {{ }};
statistics-channels {{ inet 127.0.0.1 port {self.stats_port} allow {{ 127.0.0.1; }}; }};
{fwd}
""")
        self.managed = spawn_named(conf, "named (lab resolver)", self.port, "www.example.test", "A")
        return self


# The query mix: every qtype of the normalised set and a few outside it, hits, unique
# misses, secure NXDOMAIN, bogus, upstream timeouts, names a dnsdist rule drops.
MIX_QTYPES = [
    "AAAA",
    "TXT",
    "MX",
    "NS",
    "SOA",
    "SRV",
    "HTTPS",
    "SVCB",
    "CAA",
    "NULL",
    "NAPTR",
    "PTR",
    "CNAME",
    "DNSKEY",
    "DS",
    "ANY",
]


def write_queries(path: Path) -> int:
    lines = ["www.example.test A"] * 150
    lines += [f"www.example.test {t}" for t in MIX_QTYPES for _ in range(5)]
    lines += [f"u{i}.insecure.test A" for i in range(150)]
    lines += [f"nx{i}.example.test A" for i in range(40)]
    lines += ["www.bogus.test A"] * 20
    lines += [f"t{i}.timeout.test A" for i in range(4)]
    lines += [f"x{i}.drop.test A" for i in range(20)]
    # A fixed interleaving, so each run sends the same sequence.
    mixed = [lines[(i * 7919) % len(lines)] for i in range(len(lines))]
    assert sorted(mixed) == sorted(lines)
    path.write_text("\n".join(mixed) + "\n")
    return len(mixed)


def dnsperf(address: str, queries: Path, log: Path) -> str:
    """One bounded run (each query once, at most 400 qps, 20 s); its output."""
    host, port = address.rsplit(":", 1)
    out = subprocess.run(
        [
            binary("dnsperf"),
            *("-s", host, "-p", port, "-d", str(queries)),
            *("-n", "1", "-l", "20", "-Q", "400", "-c", "4", "-t", "2", "-D"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    log.write_text(out.stdout + out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def settle(
    read: Callable[[], T],
    idle: Callable[[T], bool] = lambda _: True,
    *,
    timeout: float = 40,
    pause: float = 1.0,
) -> T:
    """Wait until the resolver is ``idle`` (nothing in recursion) and ``read()`` gives the
    same value twice ``pause`` apart: it has finished what the load left in flight
    (upstream timeouts, retries; BIND gives up on a silent server after 10 s)."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(pause)
        now = read()
        if now == last and idle(now):
            return now
        last = now
    raise AssertionError(f"statistics still moving after {timeout}s: {last}")
