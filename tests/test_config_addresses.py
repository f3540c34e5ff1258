"""Addresses normalised once, wherever the configuration names one: a target, the target a
dnstap identity names, a probe_allowlist entry. ``ip`` is ``ip:53`` and ``[::1]:53`` is
``::1``; a duplicate target and an identity naming no target are refused
(tests/configs/invalid holds their exact messages)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet import config
from dnsfleet.app import Exporter
from dnsfleet.config import Config
from dnsfleet.hostfs import HostFS
from tests.harness.dnstapwriter import Writer, pair
from tests.harness.metrics import matching, samples


def load(tmp_path: Path, doc: dict[str, Any]) -> Config:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(yaml.safe_dump({"resolv_conf": [], **doc}))
    return config.load(p)


MODULES: dict[str, dict[str, Any]] = {"recursive": {}, "other": {}}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("target", "named", "resolved"),
    [
        ("127.77.0.1", "127.77.0.1:53", "127.77.0.1"),
        ("127.77.0.1:53", "127.77.0.1", "127.77.0.1:53"),
        ("::1", "[::1]:53", "::1"),
        ("[::1]:53", "::1", "[::1]:53"),
        ("127.77.0.1:5353", "127.77.0.1:5353", "127.77.0.1:5353"),
        ("127.77.0.1:5353", "127.77.0.1", "127.77.0.1:5353"),  # no port: the target at that IP
    ],
)
def test_an_identity_names_its_target_by_the_targets_own_address(
    tmp_path: Path, target: str, named: str, resolved: str
) -> None:
    cfg = load(
        tmp_path,
        {
            "modules": MODULES,
            "targets": [{"address": target, "module": "recursive"}],
            "dnstap": {"socket": "/run/dnstap.sock", "identities": {"r1": named}},
        },
    )
    assert cfg.dnstap.identities == (("r1", resolved),)


@pytest.mark.unit
def test_one_address_with_two_modules_is_two_targets(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        {
            "modules": MODULES,
            "targets": [
                {"address": "127.0.0.1", "module": "recursive"},
                {"address": "127.0.0.1:53", "module": "other"},
            ],
        },
    )
    assert len(cfg.targets) == 2


@pytest.mark.unit
def test_ipv4_mapped_allowlist_entries_are_the_ipv4_networks(tmp_path: Path) -> None:
    """/probe judges ``::ffff:a.b.c.d`` by the IPv4 host it reaches: a mapped entry, kept as
    IPv6, matched nothing."""
    cfg = load(
        tmp_path,
        {
            "targets": [],
            "probe_allowlist": ["::ffff:10.0.0.0/104", "::ffff:192.0.2.7", "::1", "2001:db8::/32"],
        },
    )
    assert [str(n) for n in cfg.probe_allowlist] == [
        "10.0.0.0/8",
        "192.0.2.7/32",
        "::1/128",
        "2001:db8::/32",
    ]


@pytest.mark.integration
def test_identity_with_port_keeps_the_targets_site_label(tmp_path: Path) -> None:
    """The identity is mapped to ``127.77.0.1:53``, the target written ``127.77.0.1``: the
    dnstap series lost the target's ``site`` label (and the dnstap SLO source, which joins
    on it, fed nothing)."""
    sock = tmp_path / "dnstap.sock"
    p = tmp_path / "dnsfleet.yml"
    p.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],
                "modules": {"m": {"timeout": "200ms"}},
                "targets": [{"address": "127.77.0.1", "module": "m", "labels": {"site": "ams"}}],
                "dnstap": {"socket": str(sock), "identities": {"r1": "127.77.0.1:53"}},
            }
        )
    )
    exp = Exporter(fs=HostFS(), config_file=str(p))
    try:
        w = Writer(str(sock))
        w.handshake()
        for i in range(10):
            w.send(*pair("a.test.", qid=i, port=3000 + i, identity=b"r1"))
        w.stop()
        deadline = time.monotonic() + 30
        while True:
            got = samples(asyncio.run(exp.scrape(5.0)).decode())
            n = matching(got, "dnsfleet_dnstap_responses_total", rcode="NOERROR")
            if n == 10 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert n == 10
        labels = {"target": "127.77.0.1", "site": "ams", "rcode": "NOERROR"}
        assert matching(got, "dnsfleet_dnstap_responses_total", **labels) == 10
    finally:
        exp.close()
