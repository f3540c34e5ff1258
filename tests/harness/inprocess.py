"""The exporter in the test's own process, on a config written from a dict, and one scrape
read back as samples (tests/test_dnssec.py, tests/test_encrypted.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from dnsfleet.app import Exporter
from dnsfleet.hostfs import HostFS
from tests.harness.metrics import Samples, samples


def exporter(tmp_path: Path, doc: dict[str, Any]) -> Exporter:
    """An Exporter on ``doc``; never the machine's own resolv.conf."""
    path = tmp_path / "dnsfleet.yml"
    path.write_text(yaml.safe_dump({"resolv_conf": [], **doc}))
    return Exporter(fs=HostFS(), config_file=str(path))


def scrape(exp: Exporter) -> Samples:
    """One probe-and-collect cycle with an 8 s scrape timeout, as samples."""
    return samples(asyncio.run(exp.scrape(8.0)).decode())
