"""Host collectors on fixture trees and on this machine: golden exposition (checked with
promtool), failure isolation (a broken subsystem fails its collector only), the CLI."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.config import Config, ConfigError, parse
from dnsfleet.exposition import Family, render
from dnsfleet.hostfs import HostFS, HostReadError, StrPath
from tests.harness import metrics
from tests.harness.hosttree import FIXTURES, TREES, host_fs
from tests.harness.metrics import of, promtool_check

GOLDEN = FIXTURES / "host" / "x86.golden.prom"
HOST = ("bonding", "nic", "cpu_latency")


def collect(fs: HostFS, *, resolver: str | None = "unbound") -> list[Family]:
    cfg = parse(
        {"targets": [], "host": {"resolver_process": resolver}} if resolver else {"targets": []},
        source="test",
    )
    return asyncio.run(_run(fs, cfg))


async def _run(fs: HostFS, cfg: Config) -> list[Family]:
    ctx = CollectContext(
        fs=fs, config=cfg, deadline=asyncio.get_running_loop().time() + 30, state={}
    )
    return await run_collectors(ctx, {n: COLLECTORS[n] for n in HOST})


def value(fams: list[Family], name: str, **labels: str) -> float | None:
    return metrics.value(of(fams), name, **labels)


def success(fams: list[Family]) -> dict[str, float]:
    return {c: value(fams, "dnsfleet_collector_success", collector=c) or 0.0 for c in HOST}


def deterministic(fams: list[Family]) -> str:
    """Without durations, collectors in a fixed order (they finish in any order)."""
    out = []
    for f in fams:
        if f.name == "dnsfleet_collector_duration_seconds":
            continue
        out.append(Family(f.name, f.help, f.type, sorted(f.samples)))
    return render(out)


def copy_tree(name: str, dest: Path) -> Path:
    root = dest / name
    shutil.copytree(TREES / name, root, symlinks=True)
    return root


CopyTree = Callable[[str], Path]
MEMORY = Path("/dev/shm")


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[CopyTree]:
    """A fresh copy of a fixture tree (~700 files) to break, in memory where /dev/shm is
    there: on a busy disk each copy to tmp_path took up to 0.6 s, most of these tests."""
    scratch = (
        Path(tempfile.mkdtemp(prefix="dnsfleet-tree-", dir=MEMORY))
        if MEMORY.is_dir() and os.access(MEMORY, os.W_OK)
        else tmp_path
    )
    try:
        yield lambda name: copy_tree(name, scratch)
    finally:
        if scratch != tmp_path:
            shutil.rmtree(scratch, ignore_errors=True)


# ------------------------------------------------------------------ golden


@pytest.mark.integration
def test_golden_exposition_of_x86_tree(tmp_path: Path) -> None:
    text = deterministic(collect(host_fs(TREES / "x86")))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "after an intended change: `make golden`, review the diff"
    out = promtool_check(text)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.unit
def test_x86_tree_values() -> None:
    fams = collect(host_fs(TREES / "x86"))
    assert success(fams) == {"bonding": 1, "nic": 1, "cpu_latency": 1}
    v = functools.partial(value, fams)
    # ixgbe: four TxRx vectors, the "eth0" link vector is not a queue.
    assert v("dnsfleet_nic_queues", device="eth0") == 4
    assert v("dnsfleet_nic_queue_interrupts_total", device="eth0", queue="eth0-TxRx-0") == 9e6
    assert v("dnsfleet_nic_cpu_interrupts_total", device="eth0", cpu="0") == 9e6
    assert v("dnsfleet_nic_irq_cpus", device="eth0") == 4
    # eth1: every queue on CPU 0 (affinity collapsed), 8 CPUs allowed.
    assert v("dnsfleet_nic_irq_cpus", device="eth1") == 1
    assert v("dnsfleet_nic_queue_affinity_cpus", device="eth1", queue="eth1-TxRx-2") == 8
    # mlx5 by msi_irqs (async vector excluded), and by PCI address without msi_irqs.
    assert v("dnsfleet_nic_queues", device="ens1f0np0") == 4
    assert v("dnsfleet_nic_cpu_interrupts_total", device="ens1f0np0", cpu="0") == 20
    assert v("dnsfleet_nic_queues", device="ens1f1np1") == 2
    assert v("dnsfleet_nic_queues", device="lo") is None
    assert v("dnsfleet_softirq_net_rx_total", cpu="7") == 703400
    assert v("dnsfleet_irqbalance_running") == 0
    # unbound's 4 threads ran on CPUs 0, 1, 5, 6; mlx5 port 0 interrupts go to CPUs 4-7.
    assert v("dnsfleet_resolver_threads", process="unbound") == 4  # not 5: two processes
    assert v("dnsfleet_resolver_processes", process="unbound") == 2
    assert v("dnsfleet_resolver_cpus", process="unbound") == 4
    assert v("dnsfleet_nic_resolver_shared_cpus", device="ens1f0np0", process="unbound") == 2
    assert v("dnsfleet_nic_resolver_shared_cpus", device="eth1", process="unbound") == 1
    for level, n in (("1", 2), ("2", 2), ("3", 2)):
        assert (
            v(
                "dnsfleet_nic_resolver_cache_local_threads",
                device="ens1f0np0",
                process="unbound",
                level=level,
            )
            == n
        )
    assert (
        v("dnsfleet_nic_resolver_cache_local_threads", device="eth1", process="unbound", level="2")
        == 2
    )  # CPUs 0 and 1 share L2 with CPU 0
    assert (
        v("dnsfleet_nic_resolver_cache_local_threads", device="eth1", process="unbound", level="3")
        == 2
    )
    # Bonds.
    assert v("dnsfleet_bond_slaves_up", bond="bond0") == 1
    assert v("dnsfleet_bond_active_slave_info", bond="bond0", slave="eth2") == 1
    assert v("dnsfleet_bond_ad_aggregator_mismatch_slaves", bond="bond1") == 1
    assert v("dnsfleet_bond_slave_ad_churned", bond="bond1", slave="ens1f1np1", side="partner") == 1
    # tuned latency-performance: C6 disabled, PM QoS 2 µs -> only POLL and C1 (2 µs).
    assert v("dnsfleet_pm_qos_cpu_latency_seconds") == 2e-6
    assert v("dnsfleet_cpu_wakeup_latency_seconds") == 2e-6
    assert v("dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 0
    assert v("dnsfleet_cpuidle_state_enabled_cpus", state="C1E") == 8
    assert v("dnsfleet_cpuidle_state_exit_latency_seconds", state="C6") == 133e-6
    assert v("dnsfleet_cpuidle_state_entries_total", state="C1") == 8 * 900_000
    assert v("dnsfleet_cpu_scaling_governor_cpus", governor="performance") == 8
    assert v("dnsfleet_tuned_profile_info", profile="latency-performance") == 1
    assert v("dnsfleet_cpuidle_driver_info", driver="intel_idle", governor="menu") == 1
    assert v("dnsfleet_intel_idle_max_cstate") == 9


@pytest.mark.unit
def test_cardinality_is_queues_plus_cpus() -> None:
    fams = collect(host_fs(TREES / "x86"))
    per_device: dict[str, int] = {}
    for (name, labels), _ in of(fams).items():
        if name.startswith("dnsfleet_nic_"):
            dev = dict(labels)["device"]
            per_device[dev] = per_device.get(dev, 0) + 1
    # 4 queues x 2 + <= 8 CPUs + queues + irq_cpus + locality (1 + 3 levels)
    assert all(n <= 4 * 2 + 8 + 2 + 4 for n in per_device.values()), per_device


@pytest.mark.unit
def test_acpi_virtio_tree() -> None:
    fams = collect(host_fs(TREES / "acpi-virtio"), resolver="named")
    assert success(fams) == {"bonding": 1, "nic": 1, "cpu_latency": 1}
    v = functools.partial(value, fams)
    # virtio: the vectors are on the PCI function above the virtioN device.
    # One rx/tx pair: one receive queue, two queue vectors (input.0, output.0).
    assert v("dnsfleet_nic_queues", device="eth0") == 1
    assert v("dnsfleet_nic_queue_vectors", device="eth0") == 2
    # intel_idle's parameter is there but acpi_idle is the driver: not exported.
    assert v("dnsfleet_intel_idle_max_cstate") is None
    assert v("dnsfleet_nic_queue_interrupts_total", device="eth0", queue="virtio2-input.0") == 2273
    assert v("dnsfleet_irqbalance_running") == 1
    assert v("dnsfleet_resolver_threads", process="named") == 3
    # ARP monitoring only; all slaves down; no monitoring; sysfs-only bonds.
    assert v("dnsfleet_bond_link_monitoring_interval_seconds", bond="bond0", method="arp") == 1
    assert v("dnsfleet_bond_link_monitoring_interval_seconds", bond="bond0", method="mii") == 0
    assert v("dnsfleet_bond_slaves_up", bond="bond1") == 0
    assert v("dnsfleet_bond_active_slave_info", bond="bond1", slave="eth0") is None
    assert v("dnsfleet_bond_link_monitoring_interval_seconds", bond="bond2", method="mii") == 0
    assert (v("dnsfleet_bond_slaves", bond="int"), v("dnsfleet_bond_slaves_up", bond="int")) == (
        2,
        1,
    )
    assert v("dnsfleet_bond_slaves", bond="bondx") == 0
    assert v("dnsfleet_bond_active_slave_info", bond="dmz", slave="eth0") == 1
    # No PM QoS limit: cpu0 may enter C3 (350 µs); cpu1's resume limit (150) stops at C2.
    assert v("dnsfleet_pm_qos_cpu_latency_seconds") == 2000
    assert v("dnsfleet_cpu_wakeup_latency_seconds") == 350e-6
    assert v("dnsfleet_cpuidle_driver_info", driver="acpi_idle", governor="menu") == 1
    assert v("dnsfleet_cpu_scaling_governor_cpus", governor="powersave") == 1


@pytest.mark.unit
def test_arm_ena_tree_maps_queues_by_name() -> None:
    fams = collect(host_fs(TREES / "arm-ena"), resolver=None)
    assert success(fams) == {"bonding": 1, "nic": 1, "cpu_latency": 1}
    assert value(fams, "dnsfleet_nic_queues", device="eth0") == 8
    assert value(fams, "dnsfleet_nic_cpu_interrupts_total", device="eth0", cpu="5") == 71
    assert (
        value(fams, "dnsfleet_bond_slave_ad_churned", bond="bond0", slave="eth1", side="partner")
        == 1
    )
    # No cpuidle, no /dev/cpu_dma_latency: no CPU latency families, and no failure.
    assert not [n for n, _ in of(fams) if n.startswith(("dnsfleet_cpu", "dnsfleet_pm"))]


@pytest.mark.unit
def test_wakeup_latency_with_deep_states_disabled_and_pm_qos(tree: CopyTree) -> None:
    root = tree("acpi-virtio")
    cpu = root / "sys" / "devices" / "system" / "cpu"
    for n in (0, 1):
        (cpu / f"cpu{n}" / "cpuidle" / "state3" / "disable").write_text("1\n")
    fams = collect(host_fs(root), resolver=None)
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 100e-6
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C3") == 0
    from tests.harness.hosttree import TreeWriter, pm_qos

    pm_qos(TreeWriter(root), 20)  # e.g. tuned force_latency=20
    fams = collect(host_fs(root), resolver=None)
    assert value(fams, "dnsfleet_pm_qos_cpu_latency_seconds") == 20e-6
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 1e-6


# ------------------------------------------------------------------ failure isolation


def break_path(path: Path) -> None:
    """Make a file unreadable even for root: a directory where the file is expected."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.mkdir(parents=True)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("collector", "rel"),
    [
        ("nic", "proc/interrupts"),
        ("nic", "proc/softirqs"),
        ("nic", "proc/irq/41/effective_affinity_list"),
        ("bonding", "proc/net/bonding/bond1"),
        ("cpu_latency", "sys/devices/system/cpu/cpu3/cpuidle/state2/usage"),
        ("cpu_latency", "sys/module/intel_idle/parameters/max_cstate"),
    ],
)
def test_unreadable_file_fails_only_its_collector(tree: CopyTree, collector: str, rel: str) -> None:
    root = tree("x86")
    break_path(root / rel)
    fams = collect(host_fs(root))
    assert success(fams) == {c: 0 if c == collector else 1 for c in HOST}
    # No partial data from the failed collector.
    prefix = {
        "nic": ("dnsfleet_nic", "dnsfleet_softirq"),
        "bonding": ("dnsfleet_bond",),
        "cpu_latency": ("dnsfleet_cpuidle", "dnsfleet_cpu_"),
    }[collector]
    assert not [n for n, _ in of(fams) if n.startswith(prefix)]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("collector", "rel", "garbage"),
    [
        ("nic", "proc/interrupts", "this is not /proc/interrupts\n"),
        ("nic", "proc/irq/40/smp_affinity_list", "zero-three\n"),
        ("nic", "proc/softirqs", "                    CPU0\n      NET_RX: many\n"),
        ("nic", "proc/812/task/813/stat", "813 (unbound) S\n"),
        ("bonding", "proc/net/bonding/bond0", "Bonding Mode: quantum\n"),
        ("cpu_latency", "sys/devices/system/cpu/cpu0/cpuidle/state1/latency", "fast\n"),
        ("cpu_latency", "root/dev/cpu_dma_latency", "\x01\x02"),
    ],
)
def test_garbled_file_fails_only_its_collector(
    tree: CopyTree, collector: str, rel: str, garbage: str
) -> None:
    root = tree("x86")
    (root / rel).write_text(garbage)
    fams = collect(host_fs(root))
    assert success(fams) == {c: 0 if c == collector else 1 for c in HOST}


@pytest.mark.unit
def test_permission_denied_via_hostfs(tree: CopyTree, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES as a non-root exporter would see it, simulated in HostFS (we run as root)."""
    root = tree("x86")
    real = HostFS.read_bytes

    def denied(self: HostFS, path: StrPath, *, limit: int = 1 << 22) -> bytes:
        if Path(path).name in ("interrupts", "cpu_dma_latency"):
            raise HostReadError(f"{path}: Permission denied")
        return real(self, path, limit=limit)

    monkeypatch.setattr(HostFS, "read_bytes", denied)
    fams = collect(host_fs(root))
    # /proc/interrupts unreadable fails nic; /dev/cpu_dma_latency unreadable (not root) does
    # not fail cpu_latency: the limit is unknown, so the wake-up latency is not reported.
    assert success(fams) == {"bonding": 1, "nic": 0, "cpu_latency": 1}
    assert value(fams, "dnsfleet_pm_qos_readable") == 0
    assert value(fams, "dnsfleet_pm_qos_cpu_latency_seconds") is None
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") is None
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C6") == 0


@pytest.mark.unit
@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode 000 files")
def test_permission_denied_chmod(tree: CopyTree) -> None:
    root = tree("x86")
    (root / "proc" / "net" / "bonding" / "bond0").chmod(0)
    assert success(collect(host_fs(root)))["bonding"] == 0


@pytest.mark.unit
def test_missing_subsystems_are_no_data(tmp_path: Path, tree: CopyTree) -> None:
    root = tree("x86")
    shutil.rmtree(root / "proc" / "net")
    (root / "sys" / "class" / "net" / "bonding_masters").unlink()
    shutil.rmtree(root / "sys" / "devices" / "system" / "cpu")
    shutil.rmtree(root / "sys" / "module")
    (root / "root" / "dev" / "cpu_dma_latency").unlink()
    (root / "root" / "etc" / "tuned" / "active_profile").unlink()
    fams = collect(host_fs(root))
    assert success(fams) == {"bonding": 1, "nic": 1, "cpu_latency": 1}
    names = {n for n, _ in of(fams)}
    assert not [
        n
        for n in names
        if n.startswith(("dnsfleet_bond", "dnsfleet_cpu", "dnsfleet_pm", "dnsfleet_tuned"))
    ]
    assert "dnsfleet_nic_queues" in names
    # An empty tree: nothing anywhere, still no failure.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert success(collect(host_fs(empty))) == {"bonding": 1, "nic": 1, "cpu_latency": 1}


@pytest.mark.unit
def test_process_vanishing_mid_scan(tree: CopyTree) -> None:
    """A process or thread gone between listing and reading: its comm unreadable (ESRCH
    on a real /proc; here a directory, which no read gets through either), a thread's stat
    missing. Neither fails the collector; the rest of the resolver's threads count."""
    root = tree("x86")
    break_path(root / "proc" / "990" / "comm")
    (root / "proc" / "812" / "task" / "815" / "stat").unlink()
    fams = collect(host_fs(root))
    assert success(fams)["nic"] == 1
    assert value(fams, "dnsfleet_resolver_threads", process="unbound") == 3


# ------------------------------------------------------------------ config and CLI


@pytest.mark.unit
def test_host_config_keys() -> None:
    cfg = parse(
        {
            "targets": [],
            "host": {
                "collectors": ["nic"],
                "resolver_process": "unbound",
                "nic_include": "eth.*",
                "nic_exclude": "eth1",
            },
        },
        source="c.yml",
    )
    assert cfg.host.nic_include == "eth.*" and cfg.host.collectors == ("nic",)
    with pytest.raises(ConfigError, match=r"c.yml: host.nic_exclude: invalid regular"):
        parse({"host": {"nic_exclude": "("}}, source="c.yml")
    with pytest.raises(ConfigError, match=r"host.resolver_process: process name .* 15-byte"):
        parse({"host": {"resolver_process": "a-very-long-process-name"}}, source="c.yml")
    with pytest.raises(ConfigError, match=r"host.nic: unknown key"):
        parse({"host": {"nic": 1}}, source="c.yml")


@pytest.mark.unit
def test_nic_include_exclude() -> None:
    cfg = parse(
        {"targets": [], "host": {"nic_include": "eth.*", "nic_exclude": "eth1"}}, source="t"
    )
    from dnsfleet.collectors.nic import collect as nic_collect

    fams = nic_collect(host_fs(TREES / "x86"), cfg)
    devices = {dict(lab)["device"] for n, lab in of(fams) if n == "dnsfleet_nic_queues"}
    assert devices == {"eth0"}


@pytest.mark.integration
def test_cli_once_on_fixture_tree(tmp_path: Path) -> None:
    cfg = tmp_path / "dnsfleet.yml"
    cfg.write_text("targets: []\nhost:\n  resolver_process: unbound\n")
    root = TREES / "x86"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dnsfleet",
            "--once",
            "--config.file",
            str(cfg),
            "--path.procfs",
            str(root / "proc"),
            "--path.sysfs",
            str(root / "sys"),
            "--path.rootfs",
            str(root / "root"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(out.stdout)
        for s in f.samples
    }
    for c in HOST:
        assert got[("dnsfleet_collector_success", frozenset({("collector", c)}))] == 1
    golden = {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(GOLDEN.read_text())
        for s in f.samples
    }
    assert {k: got.get(k) for k in golden} == golden


# ------------------------------------------------------------------ this machine


@pytest.mark.integration
def test_smoke_on_this_machines_proc_and_sys() -> None:
    fams = collect(HostFS(), resolver="systemd")
    assert success(fams) == {"bonding": 1, "nic": 1, "cpu_latency": 1}
    ncpu = len(Path("/proc/softirqs").read_text().splitlines()[0].split())
    net_rx = [k for k in of(fams) if k[0] == "dnsfleet_softirq_net_rx_total"]
    assert len(net_rx) == ncpu
    # Every interface with MSI vectors of its own (or a virtio function's) reports queues.
    for dev in Path("/sys/class/net").iterdir():
        d = dev / "device"
        if not d.exists():
            continue
        msi = d / "msi_irqs" if (d / "msi_irqs").exists() else d / ".." / "msi_irqs"
        if msi.exists() and any(msi.iterdir()):
            assert (value(fams, "dnsfleet_nic_queues", device=dev.name) or 0) >= 1, dev.name
    assert value(fams, "dnsfleet_irqbalance_running") in (0, 1)
    text = deterministic(fams)
    out = promtool_check(text)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.unit
def test_cpuidle_multiple_drivers_read_per_cpu(tree: CopyTree) -> None:
    """big.LITTLE-style: one cpuidle driver per cluster (cpuN/cpuidle/driver exists); the
    second cluster's C1E is slower and must not be taken from CPU 0."""
    from tests.harness.hosttree import TreeWriter, pm_qos

    root = tree("x86")
    cpu = root / "sys" / "devices" / "system" / "cpu"
    for n in range(8):
        d = cpu / f"cpu{n}" / "cpuidle"
        (d / "driver").mkdir()
        (d / "driver" / "name").write_text("little\n" if n < 4 else "big\n")
        if n >= 4:
            (d / "state2" / "latency").write_text("50\n")
    pm_qos(TreeWriter(root), 2_000_000_000)
    fams = collect(host_fs(root), resolver=None)
    assert value(fams, "dnsfleet_cpuidle_state_exit_latency_seconds", state="C1E") == 50e-6
    assert value(fams, "dnsfleet_cpu_wakeup_latency_seconds") == 50e-6


@pytest.mark.unit
def test_cpu_without_cpuidle_device(tree: CopyTree) -> None:
    root = tree("x86")
    shutil.rmtree(root / "sys" / "devices" / "system" / "cpu" / "cpu5" / "cpuidle")
    fams = collect(host_fs(root), resolver=None)
    assert success(fams)["cpu_latency"] == 1
    assert value(fams, "dnsfleet_cpuidle_state_enabled_cpus", state="C1") == 7
    assert value(fams, "dnsfleet_cpuidle_state_entries_total", state="C1") == 7 * 900_000
