"""The cpu_latency collector keeps the CPUs' layout between scrapes (the online CPUs, the
single driver's state names and exit latencies) and reads it again when the files that
change with it do: hotplug (``online``, ``present``) or another cpuidle driver."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dnsfleet.collectors import CollectorError, cpu, cputopology
from dnsfleet.exposition import Family
from dnsfleet.hostfs import MAX_READ_BYTES, HeldFiles, HostFS, StrPath
from tests.harness import metrics
from tests.harness.hosttree import TreeWriter, add_cpu, pm_qos
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

STATES = [("POLL", 0, False, 10, 1), ("C1", 2, False, 500, 10), ("C6", 133, False, 0, 0)]


@dataclass(frozen=True)
class CountingFS(HostFS):
    """The host door, recording every path it reads or lists."""

    seen: list[str] = field(default_factory=list, compare=False, hash=False)

    def read_bytes(self, path: StrPath, *, limit: int = MAX_READ_BYTES) -> bytes:
        self.seen.append(str(path))
        return super().read_bytes(path, limit=limit)

    def read_many(
        self,
        base: StrPath,
        names: Sequence[str],
        *,
        limit: int = MAX_READ_BYTES,
        unreadable_as_missing: bool = False,
    ) -> list[bytes | None]:
        self.seen.extend(f"{base}/{n}" for n in names)
        return super().read_many(
            base, names, limit=limit, unreadable_as_missing=unreadable_as_missing
        )

    def read_held(
        self,
        held: HeldFiles,
        paths: Sequence[str],
        *,
        prune: bool = False,
        unreadable_as_missing: bool = False,
    ) -> list[bytes | None]:
        self.seen.extend(paths)
        return super().read_held(
            held, paths, prune=prune, unreadable_as_missing=unreadable_as_missing
        )

    def listdir(self, path: StrPath) -> list[str]:
        self.seen.append(str(path) + "/")
        return super().listdir(path)


def build(root: Path, cpus: int) -> CountingFS:
    t = TreeWriter(root)
    for c in range(cpus):
        add_cpu(t, c, states=STATES, governor="performance")
    t.write("sys/devices/system/cpu/online", f"0-{cpus - 1}")
    t.write("sys/devices/system/cpu/present", f"0-{cpus - 1}")
    t.write("sys/devices/system/cpu/cpuidle/current_driver", "intel_idle")
    pm_qos(t, 2_000_000_000)
    return CountingFS(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root")


def value(fams: list[Family], name: str, **labels: str) -> float | None:
    return metrics.value(of(fams), name, **labels)


def test_static_files_are_read_once_and_counters_every_scrape(tmp_path: Path) -> None:
    fs = build(tmp_path, 4)
    cpu.collect(fs, None)  # type: ignore[arg-type]
    first = list(fs.seen)
    assert any(p.endswith("/state1/latency") for p in first)
    fs.seen.clear()
    usage = tmp_path / "sys/devices/system/cpu/cpu2/cpuidle/state1/usage"
    usage.write_text("25\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    again = list(fs.seen)
    # The driver's table is checked on the first CPU only (acpi_idle rewrites it in place).
    static = [p for p in again if p.endswith(("/name", "/latency", "/"))]
    assert sorted(static) == sorted(
        f"{tmp_path}/sys/devices/system/cpu/cpu0/cpuidle/state{k}/{f}"
        for k in range(len(STATES))
        for f in ("name", "latency")
    ), static
    assert len(again) < len(first)
    # Every CPU's disable, time and usage of every state, its resume latency and governor.
    per_cpu = [p for p in again if "/cpu2/" in p]
    assert len(per_cpu) == len(STATES) * 3 + 2, per_cpu
    # Counters and settings are read every time.
    assert value(fams, "dnsfleet_cpuidle_state_entries_total", state="C1") == 10 * 3 + 25


def test_hotplug_is_seen(tmp_path: Path) -> None:
    fs = build(tmp_path, 4)
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 4
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-1,3\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 3
    assert value(fams, "dnsfleet_cpu_scaling_governor_cpus", governor="performance") == 3


def test_another_driver_reads_the_states_again(tmp_path: Path) -> None:
    fs = build(tmp_path, 2)
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 133e-6
    for c in range(2):
        (tmp_path / f"sys/devices/system/cpu/cpu{c}/cpuidle/state2/latency").write_text("41\n")
    (tmp_path / "sys/devices/system/cpu/cpuidle/current_driver").write_text("acpi_idle\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 41e-6
    assert value(fams, "dnsfleet_cpuidle_driver_info", driver="acpi_idle", governor="") == 1


def test_a_state_disabled_by_an_admin_shows_on_the_next_scrape(tmp_path: Path) -> None:
    """``disable`` is a setting, not layout: read again every scrape, like the counters."""
    fs = build(tmp_path, 4)
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 4
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 133e-6
    for c in range(4):
        (tmp_path / f"sys/devices/system/cpu/cpu{c}/cpuidle/state2/disable").write_text("1\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 0
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 2e-6
    (tmp_path / "sys/devices/system/cpu/cpu1/cpuidle/state2/disable").write_text("0\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 1
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 133e-6


@pytest.mark.parametrize(
    ("rel", "content", "message"),
    [
        ("cpu3/cpuidle/state1/time", "-5\n", "expected a non-negative integer, got '-5'"),
        ("cpu0/cpuidle/state0/disable", None, "Is a directory"),
        ("cpu2/power/pm_qos_resume_latency_us", "soon\n", "unexpected 'soon'"),
    ],
)
def test_a_bad_per_cpu_file_fails_the_collector_naming_it(
    tmp_path: Path, rel: str, content: str | None, message: str
) -> None:
    fs = build(tmp_path, 4)
    path = tmp_path / "sys/devices/system/cpu" / rel
    if content is None:
        # Before the first scrape: a file held open from an earlier scrape is the file read
        # (sysfs never puts another file under an attribute's name; its removal fails the
        # held descriptor, test_hostfs).
        path.unlink()
        path.mkdir()
    else:
        cpu.collect(fs, None)  # type: ignore[arg-type]
        path.write_text(content)
    with pytest.raises(CollectorError) as e:
        cpu.collect(fs, None)  # type: ignore[arg-type]
    assert message in str(e.value)
    if "resume" not in rel:  # parse_resume_latency's message names its file only
        assert str(e.value).startswith(f"{path}: "), str(e.value)


def test_a_driver_table_rewritten_in_place_is_seen(tmp_path: Path) -> None:
    """acpi_idle rewrites its states (names, exit latencies) on a _CST change notification
    without a change of driver: the first CPU's table is read every scrape."""
    fs = build(tmp_path, 3)
    assert value(cpu.collect(fs, None), "dnsfleet_cpu_wakeup_latency_seconds") == 133e-6  # type: ignore[arg-type]
    for c in range(3):
        d = tmp_path / f"sys/devices/system/cpu/cpu{c}/cpuidle/state2"
        (d / "latency").write_text("59\n")
        (d / "name").write_text("C3\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 59e-6
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C3") == 3
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") is None


def test_a_cpu_taken_offline_and_back(tmp_path: Path) -> None:
    fs = build(tmp_path, 4)
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_entries_total", state="C1") == 40
    online = tmp_path / "sys/devices/system/cpu/online"
    online.write_text("0,2-3\n")
    (tmp_path / "sys/devices/system/cpu/cpu1/cpuidle/state1/usage").write_text("1000\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_entries_total", state="C1") == 30
    online.write_text("0-3\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_entries_total", state="C1") == 1030
    (tmp_path / "sys/devices/system/cpu/cpu1/cpuidle/state1/usage").write_text("1001\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_state_entries_total", state="C1") == 1031


def test_the_cpuidle_governor_switched_shows_on_the_next_scrape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """current_governor is read every scrape through a held descriptor, with the files the
    layout is kept on: none of them is opened afresh by a second scrape."""
    fs = build(tmp_path, 2)
    governor = tmp_path / "sys/devices/system/cpu/cpuidle/current_governor"
    governor.write_text("menu\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_driver_info", driver="intel_idle", governor="menu") == 1
    fs.seen.clear()
    opened: list[str] = []
    real_open = os.open

    def record(path: StrPath, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(str(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", record)
    governor.write_text("teo\n")
    fams = cpu.collect(fs, None)  # type: ignore[arg-type]
    assert value(fams, "dnsfleet_cpuidle_driver_info", driver="intel_idle", governor="teo") == 1
    system = {f"{tmp_path}/sys/devices/system/cpu/{f}" for f in cputopology.SYSTEM_FILES}
    missing = {p for p in system if not Path(p).exists()}  # opened (and not found) each time
    assert system <= set(fs.seen)
    assert not (system - missing) & set(opened), opened
