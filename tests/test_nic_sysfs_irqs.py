"""The nic collector reads its vectors' counts from /sys/kernel/irq/<irq>/per_cpu_count and
their names from ``actions`` where every NIC maps its vectors by msi_irqs, and gives what
/proc/interrupts would: the online CPUs' columns (per_cpu_count has every possible CPU's),
each change at the next scrape, and /proc/interrupts where sysfs cannot say (a file cut at a
page, a vector without its directory)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from dnsfleet.collectors import nic
from dnsfleet.config import parse
from dnsfleet.exposition import render
from dnsfleet.hostfs import HostFS, StrPath
from dnsfleet.parsers.interrupts import parse_interrupts, parse_per_cpu_count
from tests.harness import metrics
from tests.harness.hosttree import TREES, TreeWriter, held_reads_fail_once_removed
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

# The x86 tree's NICs that have msi_irqs (ens1f1np1 is matched by name: /proc/interrupts).
CONFIG = parse(
    {
        "targets": [],
        "host": {"resolver_process": "unbound", "nic_include": "eth0|eth1|ens1f0np0"},
    },
    source="test",
)
OFFLINE = 1_000_000  # what CPU 8, possible but offline, took before it went


def tree(tmp_path: Path, name: str, *, sysfs: bool) -> tuple[TreeWriter, HostFS]:
    root = tmp_path / name
    shutil.copytree(TREES / "x86", root, symlinks=True)
    t = TreeWriter(root)
    if sysfs:
        t.write("sys/devices/system/cpu/possible", "0-8")
        ints = parse_interrupts((root / "proc/interrupts").read_text())
        for line in ints.lines:
            if line.irq.isdigit():
                write_irq(t, line.irq, line.actions, line.counts)
    return t, HostFS(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root")


def write_irq(t: TreeWriter, irq: str, actions: str, counts: tuple[int, ...]) -> None:
    t.write(f"sys/kernel/irq/{irq}/actions", actions.replace(", ", ","))
    t.write(f"sys/kernel/irq/{irq}/per_cpu_count", ",".join(map(str, (*counts, OFFLINE))))


def exposition(fs: HostFS) -> str:
    return render(nic.collect(fs, CONFIG))


def queue_total(fs: HostFS, queue: str) -> float | None:
    return metrics.value(
        of(nic.collect(fs, CONFIG)),
        "dnsfleet_nic_queue_interrupts_total",
        device="eth1",
        queue=queue,
    )


def test_sysfs_gives_what_proc_interrupts_gives(tmp_path: Path) -> None:
    _, proc = tree(tmp_path, "proc", sysfs=False)
    t, sysfs = tree(tmp_path, "sysfs", sysfs=True)
    assert exposition(sysfs) == exposition(proc)
    assert "dnsfleet_nic_queue_interrupts_total" in exposition(sysfs)
    # Read from sysfs indeed: /proc/interrupts no longer agrees, and is not what counts.
    (t.root / "proc/interrupts").write_text("garbage\n")
    assert exposition(sysfs) == exposition(proc)


def test_counts_cpus_and_vectors_changed_show_at_the_next_scrape(tmp_path: Path) -> None:
    t, fs = tree(tmp_path, "sysfs", sysfs=True)
    before = queue_total(fs, "eth1-TxRx-0")
    assert before is not None
    line = parse_interrupts((t.root / "proc/interrupts").read_text()).by_irq()["45"]
    assert line.actions == "eth1-TxRx-0"
    write_irq(t, "45", line.actions, tuple(c + 5 for c in line.counts))
    assert queue_total(fs, "eth1-TxRx-0") == before + 5 * len(line.counts)
    # CPU 7 goes offline: its column goes, as it does from /proc/interrupts.
    (t.root / "sys/devices/system/cpu/online").write_text("0-6\n")
    assert queue_total(fs, "eth1-TxRx-0") == before + 5 * 7 - line.counts[7]
    (t.root / "sys/devices/system/cpu/online").write_text("0-7\n")
    # ethtool -L: a vector more for eth1.
    t.write("sys/devices/pci0000:00/0000:00:02.0/0000:03:00.1/msi_irqs/99", "msix")
    write_irq(t, "99", "eth1-TxRx-9", tuple(range(8)))
    assert queue_total(fs, "eth1-TxRx-9") == sum(range(8))


def test_without_sys_kernel_irq_no_vector_file_is_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel before 4.17 has no /sys/kernel/irq: one look, not a failed open a file."""
    _, fs = tree(tmp_path, "proc", sysfs=False)
    opened: list[str] = []
    real = os.open

    def record(path: StrPath, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(str(path))
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", record)
    assert "dnsfleet_nic_queue_interrupts_total" in exposition(fs)
    assert not [p for p in opened if "/kernel/irq/" in p]
    assert [p for p in opened if p.endswith("/proc/interrupts")]


@pytest.mark.parametrize("cut", ["short", "missing"])
def test_where_sysfs_cannot_say_proc_interrupts_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    _, proc = tree(tmp_path, "proc", sysfs=False)
    t, sysfs = tree(tmp_path, "sysfs", sysfs=True)
    exposition(sysfs)
    count = t.root / "sys/kernel/irq/45/per_cpu_count"
    if cut == "short":  # the kernel stops at a page: fewer counts than possible CPUs
        count.write_text(",".join(count.read_text().split(",")[:5]))
    else:
        # The IRQ's directory gone (an older kernel has none): a held descriptor of a
        # removed attribute fails (kernfs: ENODEV).
        held_reads_fail_once_removed(monkeypatch, errno.ENODEV)
        shutil.rmtree(count.parent)
        for p in (proc, sysfs):  # what only a fresh read of /proc/interrupts can say
            text = (p.procfs / "interrupts").read_text()
            assert " 45:     100000 " in text
            (p.procfs / "interrupts").write_text(
                text.replace(" 45:     100000 ", " 45:     900000 ")
            )
    assert exposition(sysfs) == exposition(proc)


@pytest.mark.parametrize(
    ("text", "possible", "online", "want"),
    [
        ("1,2,3,4\n", (0, 1, 2, 3), (0, 1, 2, 3), (1, 2, 3, 4)),
        ("1,2,3,4\n", (0, 1, 2, 3), (0, 2), (1, 3)),  # CPUs 1 and 3 offline
        ("5,6\n", (0, 4), (4,), (6,)),  # sparse possible CPUs
        ("1,2,3\n", (0, 1, 2, 3), (0, 1), None),  # cut short at a page
        # Cut at a page inside the last count ("1,2,3,4567" as "1,2,3,45"): as many counts
        # as possible CPUs, but the newline the kernel writes after them is missing.
        ("1,2,3,45", (0, 1, 2, 3), (0, 1, 2, 3), None),
        ("1,x,3\n", (0, 1, 2), (0, 1), None),
        ("1,2\n", (0, 1), (0, 1, 2), None),  # an online CPU that is not possible
    ],
)
def test_parse_per_cpu_count(
    text: str, possible: tuple[int, ...], online: tuple[int, ...], want: tuple[int, ...] | None
) -> None:
    assert parse_per_cpu_count(text, possible=possible, online=online) == want
