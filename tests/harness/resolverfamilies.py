"""PowerDNS Recursor, dnsdist and Knot Resolver on loopback, each in its own temp dir, for the
resolver-family tests. None of them may reach beyond loopback: pdns-recursor gets a root
hints file whose only root is a loopback address and no security polling, dnsdist no
security polling and health checks on a name its backends serve themselves, kresd forwards
everything (policy.STUB) to a loopback server."""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass, field

from tests.harness.process import Daemon, ManagedProcess
from tests.harness.servers import wait_dns
from tests.harness.tools import binary, free_port


def wait_http(url: str, *, headers: dict[str, str] | None = None, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as resp:
                return str(resp.read().decode())
        except OSError as e:
            last = e
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer: {last}")


@dataclass
class ResolverDaemon(Daemon):
    """A resolver with a DNS port and a web port (statistics)."""

    port: int = 0
    web_port: int = 0

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.web_port = self.web_port or free_port()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _spawn(self, args: list[str]) -> None:
        self.managed = ManagedProcess(args, self.workdir / "daemon.log")


@dataclass
class PdnsRecursor(ResolverDaemon):
    forwards: dict[str, str] = field(default_factory=dict)  # zone -> "127.0.0.1:port"
    api_key: str = "dnsfleet-test"
    extra: str = ""  # more recursor.conf lines

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/metrics"

    def start(self) -> PdnsRecursor:
        hints = self.workdir / "root.hints"
        hints.write_text(
            ".  3600000 IN NS loopback-root.\nloopback-root. 3600000 IN A 127.0.0.254\n"
        )
        fwd = ",".join(f"{z}={a}" for z, a in self.forwards.items())
        (self.workdir / "recursor.conf").write_text(f"""
local-address=127.0.0.1
local-port={self.port}
socket-dir={self.workdir}
daemon=no
write-pid=no
hint-file={hints}
security-poll-suffix=
forward-zones={fwd}
webserver=yes
webserver-address=127.0.0.1
webserver-port={self.web_port}
webserver-allow-from=127.0.0.0/8
api-key={self.api_key}
{self.extra}
""")
        self._spawn([binary("pdns_recursor"), f"--config-dir={self.workdir}"])
        wait_dns("127.0.0.1", self.port, "www.example.test", "A")
        wait_http(self.metrics_url, headers={"X-API-Key": self.api_key})
        return self


@dataclass
class Dnsdist(ResolverDaemon):
    backends: dict[str, str] = field(default_factory=dict)  # name -> "127.0.0.1:port"
    check_name: str = "local.test."  # health checks: a name the backends serve
    extra: str = ""  # more Lua configuration (rules, actions)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/metrics"

    def start(self) -> Dnsdist:
        servers = "\n".join(
            f'newServer({{address="{a}", name="{n}", checkName="{self.check_name}", '
            f'checkType="SOA"}})'
            for n, a in self.backends.items()
        )
        conf = self.workdir / "dnsdist.conf"
        conf.write_text(f"""
setSecurityPollSuffix("")
setLocal("127.0.0.1:{self.port}")
{servers}
setServerPolicy(roundrobin)
webserver("127.0.0.1:{self.web_port}")
setWebserverConfig({{apiKey="dnsfleet-test", acl="127.0.0.0/8",
                     statsRequireAuthentication=false}})
{self.extra}
""")
        self._spawn([binary("dnsdist"), "-C", str(conf), "--supervised", "--disable-syslog"])
        wait_http(self.metrics_url)
        wait_dns("127.0.0.1", self.port, self.check_name, "SOA")
        return self


# kresd publishes no start time; this adds one to its /metrics (the http module's
# documented `http.prometheus.finalize` hook), as docs/configuration.md shows.
KRESD_START_TIME_LUA = """
local started = os.time()
http.prometheus.finalize = function (metrics)
  table.insert(metrics, '# TYPE process_start_time_seconds gauge')
  table.insert(metrics, 'process_start_time_seconds ' .. started)
  table.insert(metrics, 'build_info{version="' .. package_version() .. '"} 1')
end
"""


@dataclass
class Kresd(ResolverDaemon):
    upstream: str = ""  # "127.0.0.1@port": every query is forwarded there (STUB)
    start_time_metric: bool = False  # add process_start_time_seconds (KRESD_START_TIME_LUA)
    extra: str = ""  # more Lua configuration (e.g. DoT/DoH listeners)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}/metrics"

    def start(self) -> Kresd:
        conf = self.workdir / "kresd.conf"
        conf.write_text(f"""
net.listen('127.0.0.1', {self.port}, {{ kind = 'dns' }})
net.listen('127.0.0.1', {self.web_port}, {{ kind = 'webmgmt' }})
cache.size = 10 * MB
modules = {{ 'policy', 'http' }}
policy.add(policy.all(policy.STUB('{self.upstream}')))
{KRESD_START_TIME_LUA if self.start_time_metric else ""}
{self.extra}
""")
        self._spawn([binary("kresd"), "-n", "-c", str(conf), str(self.workdir)])
        wait_dns("127.0.0.1", self.port, "www.example.test", "A")
        wait_http(self.metrics_url)
        return self
