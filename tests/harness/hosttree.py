"""Fixture host trees (proc/, sys/, root/) for the host collectors.

The committed trees under tests/fixtures/host/ are written by this module; regenerate them
with ``python -m tests.harness.hosttree`` after changing it (then refresh the golden files with
``make golden``). Layouts follow real kernels:
``class/net/<if>/device`` is a symlink into ``devices/``, virtio_net's device is the virtioN
bus device under its PCI function, MSI vectors are files in ``msi_irqs/``.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dnsfleet.hostfs import HostFS

if TYPE_CHECKING:
    import pytest

HERE = Path(__file__).resolve().parent.parent  # tests/
FIXTURES = HERE / "fixtures"
TREES = FIXTURES / "host"


class TreeWriter:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, rel: str, content: str | bytes) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content if content.endswith("\n") or not content else content + "\n")

    def link(self, rel: str, target: str) -> None:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            p.unlink()
        os.symlink(target, p)

    def fs(self) -> HostFS:
        return host_fs(self.root)


def held_reads_fail_once_removed(monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    """A held descriptor (hostfs.HeldFiles) of a removed fixture file fails its read with
    ``err``, as the kernel fails one whose entry is gone (a process that exited: ESRCH; a
    /proc/net entry of an unloaded module: EIO), instead of reading the unlinked file."""
    real = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        if os.fstat(fd).st_nlink == 0:
            raise OSError(err, os.strerror(err))
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)


def host_fs(root: Path) -> HostFS:
    return HostFS(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root")


def cpu_list(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus)


def interrupts_text(
    ncpu: int,
    rows: Sequence[tuple[str, Sequence[int], str]],
    arch: Sequence[tuple[str, Sequence[int], str]] = (),
) -> str:
    """x86 layout: numbered rows (irq, counts, "chip hwirq-edge action") then arch rows."""
    out = [" " * 4 + "".join(f"{'CPU' + str(c):>11}" for c in range(ncpu))]
    for irq, counts, desc in rows:
        out.append(f"{irq + ':':>4}" + "".join(f"{n:>11}" for n in counts) + "  " + desc)
    for label, counts, desc in arch:
        out.append(f"{label + ':':>4}" + "".join(f"{n:>11}" for n in counts) + "   " + desc)
    return "\n".join(out) + "\n"


def softirqs_text(ncpu: int, net_rx: Sequence[int]) -> str:
    rows = [" " * 20 + "".join(f"{'CPU' + str(c):>11}" for c in range(ncpu))]
    for name in (
        "HI",
        "TIMER",
        "NET_TX",
        "NET_RX",
        "BLOCK",
        "IRQ_POLL",
        "TASKLET",
        "SCHED",
        "HRTIMER",
        "RCU",
    ):
        counts = net_rx if name == "NET_RX" else [c * 3 + 7 for c in range(ncpu)]
        rows.append(f"{name + ':':>12}" + "".join(f"{n:>11}" for n in counts))
    return "\n".join(rows) + "\n"


def stat_line(pid: int, comm: str, processor: int) -> str:
    # 52 fields (proc(5)); processor is field 39.
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560"] + ["0"] * 28
    fields += ["17", str(processor)] + ["0"] * 13
    return f"{pid} ({comm}) " + " ".join(fields)


def add_process(t: TreeWriter, pid: int, comm: str, thread_cpus: Sequence[int] = (0,)) -> None:
    t.write(f"proc/{pid}/comm", comm)
    for i, cpu in enumerate(thread_cpus):
        tid = pid + i
        t.write(f"proc/{pid}/task/{tid}/stat", stat_line(tid, comm, cpu))
    t.write(f"proc/{pid}/stat", stat_line(pid, comm, thread_cpus[0]))


def add_queues(t: TreeWriter, netdir: str, queues: int) -> None:
    """``queues/rx-N`` and ``queues/tx-N`` as the kernel lists a NIC's channels."""
    for k in range(queues):
        t.write(f"{netdir}/queues/rx-{k}/rps_cpus", "00")
        t.write(f"{netdir}/queues/tx-{k}/xps_cpus", "00")


def add_pci_nic(
    t: TreeWriter,
    ifname: str,
    slot: str,
    msi: Sequence[int] | None,
    driver: str,
    *,
    queues: int | None = None,
) -> None:
    dev = f"sys/devices/pci0000:00/0000:00:02.0/{slot}"
    t.write(
        f"{dev}/uevent",
        f"DRIVER={driver}\nPCI_CLASS=20000\nPCI_SLOT_NAME={slot}\n"
        f"MODALIAS=pci:v000015B3d0000101Dsv*",
    )
    if msi is not None:
        for irq in msi:
            t.write(f"{dev}/msi_irqs/{irq}", "msix")
    t.write(f"{dev}/net/{ifname}/operstate", "up")
    if queues is not None:
        add_queues(t, f"{dev}/net/{ifname}", queues)
    t.link(f"sys/class/net/{ifname}", f"../../devices/pci0000:00/0000:00:02.0/{slot}/net/{ifname}")
    t.link(f"{dev}/net/{ifname}/device", "../../../" + slot)


def add_virtio_nic(
    t: TreeWriter, ifname: str, slot: str, virtio: str, msi: Sequence[int], *, queues: int = 1
) -> None:
    pci = f"sys/devices/pci0000:00/{slot}"
    t.write(f"{pci}/uevent", f"DRIVER=virtio-pci\nPCI_CLASS=20000\nPCI_SLOT_NAME={slot}")
    for irq in msi:
        t.write(f"{pci}/msi_irqs/{irq}", "msix")
    t.write(f"{pci}/{virtio}/uevent", "DRIVER=virtio_net\nMODALIAS=virtio:d00000001v00001AF4")
    t.write(f"{pci}/{virtio}/net/{ifname}/operstate", "up")
    add_queues(t, f"{pci}/{virtio}/net/{ifname}", queues)
    t.link(f"{pci}/{virtio}/net/{ifname}/device", "../../../" + virtio)
    t.link(f"sys/class/net/{ifname}", f"../../devices/pci0000:00/{slot}/{virtio}/net/{ifname}")


def add_virtual_if(t: TreeWriter, ifname: str) -> None:
    t.write(f"sys/devices/virtual/net/{ifname}/operstate", "up")
    t.link(f"sys/class/net/{ifname}", f"../../devices/virtual/net/{ifname}")


def add_irq(t: TreeWriter, irq: int, affinity: str, effective: str | None) -> None:
    t.write(f"proc/irq/{irq}/smp_affinity_list", affinity)
    if effective is not None:
        t.write(f"proc/irq/{irq}/effective_affinity_list", effective)


def add_cpu(
    t: TreeWriter,
    cpu: int,
    *,
    states: Sequence[tuple[str, int, bool, int, int]] = (),
    governor: str | None = None,
    resume: str = "0",
    caches: Sequence[tuple[int, str, str]] = (),
) -> None:
    """states: (name, latency_us, disabled, time_us, usage); caches: (level, type, shared)."""
    base = f"sys/devices/system/cpu/cpu{cpu}"
    t.write(f"{base}/power/pm_qos_resume_latency_us", resume)
    for i, (name, lat, disabled, time_us, usage) in enumerate(states):
        d = f"{base}/cpuidle/state{i}"
        for f, v in (
            ("name", name),
            ("desc", name),
            ("latency", lat),
            ("residency", lat * 3),
            ("disable", int(disabled)),
            ("time", time_us),
            ("usage", usage),
            ("above", 0),
            ("below", 0),
        ):
            t.write(f"{d}/{f}", str(v))
    if governor:
        t.write(f"{base}/cpufreq/scaling_governor", governor)
    for i, (level, typ, shared) in enumerate(caches):
        d = f"{base}/cache/index{i}"
        t.write(f"{d}/level", str(level))
        t.write(f"{d}/type", typ)
        t.write(f"{d}/shared_cpu_list", shared)


def pm_qos(t: TreeWriter, us: int) -> None:
    t.write("root/dev/cpu_dma_latency", struct.pack("=i", us))


# ------------------------------------------------------------------------------ the trees

X86_STATES = [
    ("POLL", 0, False, 1_000, 10),
    ("C1", 2, False, 5_000_000, 900_000),
    ("C1E", 10, False, 2_000_000, 300_000),
    ("C6", 133, True, 0, 0),
]


def build_x86(root: Path) -> None:  # noqa: PLR0915 (builds one fixture tree top to bottom)
    """8-CPU x86 resolver host: two ixgbe ports (eth0 balanced by affinity but with one hot
    queue, eth1 with every queue on CPU 0), a mlx5 port mapped by msi_irqs and a second mlx5
    port without msi_irqs (name fallback by PCI address), an active-backup bond and an
    802.3ad bond with an aggregator mismatch, tuned latency-performance with C6 disabled
    and a PM QoS limit of 2 µs, unbound with four threads."""
    t = TreeWriter(root)
    ncpu = 8
    rows: list[tuple[str, Sequence[int], str]] = [
        ("0", [36] + [0] * 7, "IO-APIC   2-edge      timer"),
        ("8", [0, 1] + [0] * 6, "IO-APIC   8-edge      rtc0"),
        ("9", [0] * 8, "IO-APIC   9-fasteoi   acpi"),
        ("24", [0, 0, 52_113] + [0] * 5, "PCI-MSI 524288-edge      nvme0q0"),
    ]
    # eth0: ixgbe, queue k pinned to CPU k; queue 0 takes most of the traffic.
    eth0 = [40, 41, 42, 43]
    for k, irq in enumerate(eth0):
        counts = [0] * ncpu
        counts[k] = [9_000_000, 400_000, 350_000, 420_000][k]
        rows.append((str(irq), counts, f"PCI-MSI 1572864{k}-edge      eth0-TxRx-{k}"))
    rows.append(("44", [3, 0, 0, 0, 0, 0, 0, 0], "PCI-MSI 15728644-edge      eth0"))
    # eth1: ixgbe, every queue effectively on CPU 0.
    eth1 = [45, 46, 47, 48]
    for k, irq in enumerate(eth1):
        rows.append(
            (str(irq), [100_000 + k] + [0] * 7, f"PCI-MSI 1574912{k}-edge      eth1-TxRx-{k}")
        )
    rows.append(("49", [2] + [0] * 7, "PCI-MSI 15749124-edge      eth1"))
    # ens1f0np0: mlx5, comp k on CPU 4+k, with a few interrupts left on CPU 0 from boot.
    mlx0 = [60, 61, 62, 63, 64]
    rows.append(("60", [12] + [0] * 7, "PCI-MSI 4194304-edge      mlx5_async0@pci:0000:08:00.0"))
    for k, irq in enumerate(mlx0[1:]):
        counts = [0] * ncpu
        counts[0] = 5
        counts[4 + k] = 700_000 + 1000 * k
        rows.append(
            (str(irq), counts, f"PCI-MSI 419430{5 + k}-edge      mlx5_comp{k}@pci:0000:08:00.0")
        )
    # ens1f1np1: mlx5, no msi_irqs in sysfs; comp k on CPU k.
    rows.append(("70", [4] + [0] * 7, "PCI-MSI 4196352-edge      mlx5_async0@pci:0000:08:00.1"))
    for k in range(2):
        counts = [0] * ncpu
        counts[k] = 55_000 + k
        rows.append(
            (str(71 + k), counts, f"PCI-MSI 419635{3 + k}-edge      mlx5_comp{k}@pci:0000:08:00.1")
        )
    arch = [
        ("NMI", [1] * ncpu, "Non-maskable interrupts"),
        ("LOC", [100_000 + c for c in range(ncpu)], "Local timer interrupts"),
        ("RES", [500 + c for c in range(ncpu)], "Rescheduling interrupts"),
        ("ERR", [0], ""),
        ("MIS", [0], ""),
    ]
    t.write("proc/interrupts", interrupts_text(ncpu, rows, arch))
    for k, irq in enumerate(eth0):
        add_irq(t, irq, str(k), str(k))
    add_irq(t, 44, "0-7", "0")
    for irq in eth1:
        add_irq(t, irq, "0-7", "0")
    add_irq(t, 49, "0-7", "0")
    add_irq(t, 60, "0-7", "0")
    for k, irq in enumerate(mlx0[1:]):
        add_irq(t, irq, str(4 + k), str(4 + k))
    add_irq(t, 70, "0-7", "0")
    for k in range(2):
        add_irq(t, 71 + k, f"{k}", None)  # a kernel without effective_affinity_list
    t.write(
        "proc/softirqs",
        softirqs_text(
            ncpu, [9_100_000, 420_000, 380_000, 430_000, 700_100, 701_200, 702_300, 703_400]
        ),
    )
    add_pci_nic(t, "eth0", "0000:03:00.0", [*eth0, 44], "ixgbe", queues=4)
    add_pci_nic(t, "eth1", "0000:03:00.1", [*eth1, 49], "ixgbe", queues=4)
    add_pci_nic(t, "ens1f0np0", "0000:08:00.0", mlx0, "mlx5_core", queues=4)
    add_pci_nic(t, "ens1f1np1", "0000:08:00.1", None, "mlx5_core", queues=2)
    for name in ("lo", "bond0", "bond1"):
        add_virtual_if(t, name)
    # Bonds: bond0 from /proc, bond1 from /proc (802.3ad mismatch).
    shutil.copy(FIXTURES / "shared" / "bonding" / "active-backup-one-down.txt", _mk(root, "bond0"))
    shutil.copy(FIXTURES / "bonding" / "lacp-aggregator-mismatch.txt", _mk(root, "bond1"))
    t.write("sys/class/net/bonding_masters", "bond0 bond1")
    add_process(t, 1, "systemd")
    add_process(t, 812, "unbound", [0, 1, 5, 6])
    # A second, single-threaded process with the same name (a second instance on another
    # port): its thread is not one of the first one's.
    add_process(t, 905, "unbound", [7])
    add_process(t, 990, "sshd")
    # Topology: L1d/L1i/L2 per core pair, L3 per half.
    for cpu in range(ncpu):
        pair = f"{cpu & ~1}-{cpu | 1}"
        half = "0-3" if cpu < 4 else "4-7"
        add_cpu(
            t,
            cpu,
            states=X86_STATES,
            governor="performance",
            caches=[
                (1, "Data", pair),
                (1, "Instruction", pair),
                (2, "Unified", pair),
                (3, "Unified", half),
            ],
        )
    t.write("sys/devices/system/cpu/online", "0-7")
    t.write("sys/devices/system/cpu/cpuidle/current_driver", "intel_idle")
    t.write("sys/devices/system/cpu/cpuidle/current_governor", "menu")
    t.write("sys/module/intel_idle/parameters/max_cstate", "9")
    t.write("root/etc/tuned/active_profile", "latency-performance")
    pm_qos(t, 2)


def _mk(root: Path, name: str) -> Path:
    (root / "proc" / "net" / "bonding").mkdir(parents=True, exist_ok=True)
    return root / "proc" / "net" / "bonding" / name


def build_acpi_virtio(root: Path) -> None:
    """A 2-CPU VM like this development machine: virtio_net whose vectors are on the virtio
    PCI function, irqbalance running, ACPI idle with C3 (350 µs) enabled and no PM QoS limit,
    an ARP-monitored bond, a bond with every slave down, a bond without link monitoring and
    three sysfs-only bonds (node_exporter's tree: no proc files)."""
    t = TreeWriter(root)
    shutil.copy(FIXTURES / "shared" / "interrupts" / "x86-virtio-2cpu.txt", _proc(root))
    for irq in range(37, 40):
        add_irq(t, irq, "0-1", "1" if irq == 38 else "0")
    t.write("proc/softirqs", softirqs_text(2, [3515, 4520]))
    add_virtio_nic(t, "eth0", "0000:00:03.0", "virtio2", [37, 38, 39])
    # intel_idle built in, but acpi_idle does the work in this VM.
    t.write("sys/module/intel_idle/parameters/max_cstate", "9")
    add_virtual_if(t, "lo")
    for name, src in (
        ("bond0", "arp-monitored.txt"),
        ("bond1", "all-slaves-down.txt"),
        ("bond2", "no-monitoring.txt"),
    ):
        shutil.copy(FIXTURES / "bonding" / src, _mk(root, name))
    t.write("sys/class/net/bonding_masters", "bond0 bond1 bond2 dmz int bondx")
    for line in (FIXTURES / "shared" / "bonding" / "sysfs-tree.txt").read_text().splitlines():
        if line.startswith("#") or ":" not in line:
            continue
        rel, _, content = line.partition(":")
        if "bonding_masters" not in rel:
            t.write(rel.replace("bond0/", "bondx/"), content.strip())
    t.write("sys/class/net/dmz/bonding/mode", "active-backup 1")
    t.write("sys/class/net/dmz/bonding/active_slave", "eth0")
    t.write("sys/class/net/dmz/bonding/miimon", "100")
    t.write("sys/class/net/dmz/bonding/arp_interval", "0")
    add_process(t, 1, "systemd")
    add_process(t, 455, "irqbalance")
    add_process(t, 700, "named", [1, 1, 0])
    c3 = {
        k.strip(): v.strip()
        for k, v in (
            ln.split(":", 1)
            for ln in (FIXTURES / "shared" / "cpuidle" / "state3-acpi.txt").read_text().splitlines()
            if not ln.startswith("#") and "/" not in ln.split(":")[0]
        )
    }
    states = [
        ("POLL", 0, False, 40_000, 900),
        ("C1", 1, False, 90_000_000, 4_000_000),
        ("C2", 100, False, 20_000_000, 300_000),
        (c3["name"], int(c3["latency"]), c3["disable"] != "0", int(c3["time"]), int(c3["usage"])),
    ]
    add_cpu(
        t,
        0,
        states=states,
        governor="schedutil",
        caches=[(2, "Unified", "0"), (3, "Unified", "0-1")],
    )
    # cpu1 has a per-CPU resume latency constraint that keeps it out of C3.
    add_cpu(
        t,
        1,
        states=states,
        governor="powersave",
        resume="150",
        caches=[(2, "Unified", "1"), (3, "Unified", "0-1")],
    )
    t.write("sys/devices/system/cpu/online", "0-1")
    t.write("sys/devices/system/cpu/cpuidle/current_driver", "acpi_idle")
    t.write("sys/devices/system/cpu/cpuidle/current_governor_ro", "menu")
    pm_qos(t, 2_000_000_000)


def _proc(root: Path) -> Path:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    return root / "proc" / "interrupts"


def build_arm_ena(root: Path) -> None:
    """The 8-CPU AWS Graviton ENA host of the shared fixture: no msi_irqs (name fallback),
    the LACP bond with a churned partner, no cpuidle, no /dev/cpu_dma_latency."""
    t = TreeWriter(root)
    shutil.copy(FIXTURES / "shared" / "interrupts" / "aarch64-ena-8cpu.txt", _proc(root))
    for k, irq in enumerate(range(58, 66)):
        add_irq(t, irq, str(k), str(k))
    t.write("proc/softirqs", softirqs_text(8, [10 * c for c in range(8)]))
    add_pci_nic(t, "eth0", "0000:00:05.0", None, "ena", queues=8)
    shutil.copy(FIXTURES / "shared" / "bonding" / "lacp-partner-churned.txt", _mk(root, "bond0"))
    add_process(t, 1, "systemd")
    for cpu in range(8):
        add_cpu(t, cpu)


TREE_BUILDERS = {"x86": build_x86, "acpi-virtio": build_acpi_virtio, "arm-ena": build_arm_ena}


def main() -> None:
    for name, build in TREE_BUILDERS.items():
        dest = TREES / name
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        build(dest)
        print(f"wrote {dest}")


if __name__ == "__main__":
    main()
