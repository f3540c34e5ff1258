"""Test harness: what the tests start and read.

- :mod:`tests.harness.process`: the one managed child process (bounded readiness wait, log
  in a file, SIGTERM then SIGKILL);
- :mod:`tests.harness.exporter`: dnsfleet-exporter run as a child process on it;
- :mod:`tests.harness.metrics`: the one reader of the text exposition format;
- :mod:`tests.harness.servers` (BIND, unbound, scripted DNS peers),
  :mod:`tests.harness.resolverfamilies` (PowerDNS Recursor, dnsdist, Knot Resolver),
  :mod:`tests.harness.monitoring` (Prometheus, Alertmanager, a webhook),
  :mod:`tests.harness.consul_double` (Consul's DNS and HTTP API, in-process),
  :mod:`tests.harness.netlab` (network namespaces), :mod:`tests.harness.hosttree` (fixture
  /proc and /sys trees), :mod:`tests.harness.tools` (binaries, ports, ``num``).
"""
