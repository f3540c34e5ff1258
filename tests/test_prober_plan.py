"""The cycle's split of the targets into the shared-socket batch and a task each, and the
batch's items, are worked out once and kept across cycles (prober.py ``_plan_for``): the
same while the config, the states and the queries are the same objects; a reload, which
replaces them, gets a plan of its own (a module's new timeout, a target added, a module
given a canary query that takes its targets out of the batch)."""

from __future__ import annotations

from typing import Any

import pytest

from dnsfleet.config import parse
from dnsfleet.prober import Prober

pytestmark = pytest.mark.unit


def config(timeout: str, *, targets: int = 3, canary: bool = False) -> Any:
    module: dict[str, Any] = {"query_name": "a.test", "timeout": timeout}
    if canary:
        module["canary"] = "canary.test"
    return parse(
        {
            "resolv_conf": [],
            "modules": {"m": module, "tcp": {"query_name": "a.test", "transport": "tcp"}},
            "targets": [{"address": f"127.0.0.{i + 1}", "module": "m"} for i in range(targets)]
            + [{"address": "127.0.1.1", "module": "tcp"}],
        },
        source="x.yml",
    )


def test_the_plan_is_kept_across_cycles_and_made_again_on_reload() -> None:
    prober = Prober()
    cfg = config("2s")
    prober.configure(cfg)
    plan = prober._plan_for(cfg)
    _, batch, keys, modules, items, each = plan
    assert keys == [(st.target.address, st.target.module) for st in batch]
    assert [st.target.address for st in batch] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert [st.target.address for st in each] == ["127.0.1.1"]
    assert [m.name for m in modules] == ["m"] * 3
    assert items[0] == (("127.0.0.1", 53), batch[0].family, prober.queries["m"], 2.0)
    assert prober._plan_for(cfg) is plan

    reloaded = config("3s", targets=4)
    prober.configure(reloaded)
    _, batch, _, _, items, _ = prober._plan_for(reloaded)
    assert len(batch) == 4 and {it[3] for it in items} == {3.0}
    # A cycle still running on the config before the reload gets a plan of that config.
    assert {it[3] for it in prober._plan_for(cfg)[4]} == {2.0}

    canaried = config("3s", canary=True)
    prober.configure(canaried)
    _, batch, _, _, _, each = prober._plan_for(canaried)
    assert batch == [] and len(each) == 4
