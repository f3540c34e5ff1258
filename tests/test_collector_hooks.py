"""Collectors' start and close hooks: the exporter calls them for every collector when it
starts, after each configuration it adopts, and when it stops, and names no collector
itself."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

import dnsfleet.app
from dnsfleet.app import Exporter
from dnsfleet.collectors import CollectContext, Collector, socket_demand
from dnsfleet.config import Config
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS

pytestmark = pytest.mark.unit


class Fake:
    """A collector that records its hooks, and keeps something in the shared state."""

    def __init__(self, name: str, *, enabled: bool = True) -> None:
        self.calls: list[tuple[str, Config | None]] = []
        self.collector = Collector(
            name=name,
            run=self.run,
            enabled=lambda cfg: enabled,
            start=self.start,
            close=self.close,
        )

    async def run(self, ctx: CollectContext) -> list[Family]:
        return []

    def start(self, state: MutableMapping[str, Any], config: Config) -> None:
        self.calls.append(("start", config))
        state[self.collector.name] = "running"

    def close(self, state: MutableMapping[str, Any]) -> None:
        self.calls.append(("close", None))
        state.pop(self.collector.name, None)


def write_config(path: Path, body: str = "resolv_conf: []\n") -> str:
    path.write_text(body)
    return str(path)


def test_hooks_run_on_start_reload_and_close(tmp_path: Path) -> None:
    on, off = Fake("on"), Fake("off", enabled=False)
    plain = Collector(name="plain", run=on.run, enabled=lambda cfg: True)
    conf = write_config(tmp_path / "dnsfleet.yml")
    exp = Exporter(
        fs=HostFS(),
        config_file=conf,
        collectors={"on": on.collector, "off": off.collector, "plain": plain},
    )
    first = exp.config
    # A disabled collector sees its hooks too: one a reload disabled stops what it started.
    assert on.calls == off.calls == [("start", first)]
    assert exp.collector_state == {"on": "running", "off": "running"}

    assert asyncio.run(exp.reload()).successful
    assert exp.config is not first
    assert on.calls == [("start", first), ("start", exp.config)]

    write_config(tmp_path / "dnsfleet.yml", "resolv_conf: [\n")
    assert not asyncio.run(exp.reload()).successful
    assert len(on.calls) == 2  # a configuration not adopted starts nothing

    exp.close()
    assert on.calls[-1] == off.calls[-1] == ("close", None)
    assert exp.collector_state == {}


def test_a_config_check_starts_nothing(tmp_path: Path) -> None:
    fake = Fake("fake")
    conf = write_config(tmp_path / "dnsfleet.yml")
    Exporter(fs=HostFS(), config_file=conf, background=False, collectors={"f": fake.collector})
    assert fake.calls == []


def test_a_hook_that_fails_leaves_the_others_running(tmp_path: Path) -> None:
    def broken_start(state: MutableMapping[str, Any], config: Config) -> None:
        raise OSError("cannot start")

    def broken_close(state: MutableMapping[str, Any]) -> None:
        raise OSError("cannot stop")

    good = Fake("good")
    bad = Collector(
        name="bad", run=good.run, enabled=lambda cfg: True, start=broken_start, close=broken_close
    )
    conf = write_config(tmp_path / "dnsfleet.yml")
    exp = Exporter(fs=HostFS(), config_file=conf, collectors={"bad": bad, "good": good.collector})
    exp.close()
    assert [c for c, _ in good.calls] == ["start", "close"]


def test_socket_demand_counts_enabled_collectors_only(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "dnsfleet.yml")
    cfg = Exporter(fs=HostFS(), config_file=conf, background=False, collectors={}).config
    fake = Fake("x")

    def with_sockets(n: int, enabled: bool) -> Collector:
        return Collector(f"s{n}", fake.run, lambda cfg: enabled, sockets=lambda cfg: n)

    collectors = {"a": with_sockets(3, True), "b": with_sockets(5, False), "c": fake.collector}
    assert socket_demand(cfg, collectors) == 3


def test_the_exporter_names_no_collector() -> None:
    """app.py reaches collectors through the COLLECTORS table and the hooks only."""
    tree = ast.parse(Path(dnsfleet.app.__file__).read_text())
    imported = {
        node.module or ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dnsfleet.")
    }
    assert not {m for m in imported if m.startswith("dnsfleet.collectors.")}
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "dnsfleet.collectors"
        for alias in node.names
    }
    assert not names & {"bond", "consul", "cpu", "dnstap", "nic", "resolver", "stub", "zones"}
