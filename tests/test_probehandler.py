"""/probe rules without HTTP: probehandler.parse_request decides what may be probed (the
end-to-end paths are in test_probe_guard.py)."""

from __future__ import annotations

import pytest

from dnsfleet.config import parse
from dnsfleet.probehandler import ProbeRefused, parse_request

CFG = parse({"modules": {"m": {"query_name": "a.test"},
                         "open": {"query_name": "a.test", "allow_query_override": True}},
             "targets": [{"address": "192.0.2.1", "module": "m"}],
             "probe_allowlist": ["127.0.0.0/8"]}, source="t.yml")


@pytest.mark.parametrize("params,repeated,status,reason", [
    ({"target": "192.0.2.1"}, {"target"}, 400, "repeated parameter: target"),
    ({}, set(), 400, "missing parameter: target"),
    ({"target": "dns.example"}, set(), 400, "invalid target"),
    ({"target": "127.0.0.5"}, set(), 400, "missing parameter: module"),
    ({"target": "127.0.0.5", "module": "x"}, set(), 400, "unknown module 'x'"),
    ({"target": "198.51.100.1", "module": "m"}, set(), 403, "neither configured nor inside"),
    # An IPv4-mapped address is judged as the IPv4 host it reaches.
    ({"target": "::ffff:198.51.100.1", "module": "m"}, set(), 403, "neither configured"),
    ({"target": "127.0.0.5", "module": "m", "name": "b.test"}, set(), 403,
     "does not allow overriding"),
])
def test_refusals(params: dict[str, str], repeated: set[str], status: int,
                  reason: str) -> None:
    with pytest.raises(ProbeRefused) as e:
        parse_request(CFG, params, repeated)
    assert e.value.status == status and reason in e.value.reason


def test_allowed_requests() -> None:
    req = parse_request(CFG, {"target": "192.0.2.1"}, set())
    assert (req.module.name, req.target.host, req.target.port) == ("m", "192.0.2.1", 53)
    req = parse_request(CFG, {"target": "::ffff:127.0.0.9", "module": "open", "name": "b.test",
                              "type": "aaaa"}, set())
    assert (req.target.host, req.qname, req.qtype) == ("127.0.0.9", "b.test", "AAAA")
