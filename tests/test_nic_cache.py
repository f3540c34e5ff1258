"""The nic collector keeps which CPUs share a cache with the resolver's CPUs while the CPUs
stand, and reads it again when ``online`` or ``present`` changes (hotplug is when the kernel
rewrites shared_cpu_list); the IRQ affinities, settings irqbalance rewrites, are read every
scrape."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dnsfleet.collectors import nic, niclocality
from dnsfleet.config import parse
from dnsfleet.exposition import Family
from dnsfleet.hostfs import MAX_READ_BYTES, HeldFiles, HostFS, StrPath
from tests.harness import metrics
from tests.harness.hosttree import TREES
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

CONFIG = parse({"targets": [], "host": {"resolver_process": "unbound"}}, source="test")


@dataclass(frozen=True)
class RecordingFS(HostFS):
    """The host door, recording every file it reads."""

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


def tree(tmp_path: Path) -> tuple[Path, RecordingFS]:
    root = tmp_path / "x86"
    shutil.copytree(TREES / "x86", root, symlinks=True)
    return root, RecordingFS(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root")


def l2_local(fams: list[Family]) -> float | None:
    return metrics.value(
        of(fams),
        "dnsfleet_nic_resolver_cache_local_threads",
        device="eth1",
        process="unbound",
        level="2",
    )


def test_cache_sharing_is_read_once_while_the_cpus_stand(tmp_path: Path) -> None:
    root, fs = tree(tmp_path)
    cpu = root / "sys/devices/system/cpu"
    # unbound's threads ran on CPUs 0, 1, 5, 6; eth1's queue interrupts all go to CPU 0,
    # which shares its L2 with CPU 1.
    assert l2_local(nic.collect(fs, CONFIG)) == 2
    assert [p for p in fs.seen if "/cache/" in p]
    fs.seen.clear()
    assert l2_local(nic.collect(fs, CONFIG)) == 2
    assert not [p for p in fs.seen if "/cache/" in p], fs.seen
    assert len([p for p in fs.seen if p.endswith("/effective_affinity_list")]) > 4
    # CPU 7 goes offline: the kernel rewrites ``online`` and the shared_cpu_lists (here
    # CPU 1's L2 as if it no longer shared it, to tell a fresh read from the kept one).
    (cpu / "cpu1/cache/index2/shared_cpu_list").write_text("1\n")
    (cpu / "online").write_text("0-6\n")
    assert l2_local(nic.collect(fs, CONFIG)) == 1


def test_affinity_is_read_every_scrape(tmp_path: Path) -> None:
    root, fs = tree(tmp_path)
    irqs = metrics.value(of(nic.collect(fs, CONFIG)), "dnsfleet_nic_irq_cpus", device="eth1")
    assert irqs == 1
    # irqbalance spreads eth1's vectors: each queue's effective CPU changes.
    for k, irq in enumerate(sorted(p.name for p in (root / "proc/irq").iterdir())):
        eff = root / "proc/irq" / irq / "effective_affinity_list"
        if eff.exists() and eff.read_text().strip() == "0":
            eff.write_text(f"{k % 8}\n")
    irqs = metrics.value(of(nic.collect(fs, CONFIG)), "dnsfleet_nic_irq_cpus", device="eth1")
    assert irqs is not None and irqs > 1


def test_every_nics_affinity_lists_stay_held_between_scrapes(tmp_path: Path) -> None:
    """One read of all NICs' lists a scrape: a read per NIC let go of the NIC before's."""
    _, fs = tree(tmp_path)
    nic.collect(fs, CONFIG)
    fs.seen.clear()
    nic.collect(fs, CONFIG)
    lists = [p for p in fs.seen if p.endswith("affinity_list")]
    assert len({p.split("/")[-2] for p in lists}) > 4
    assert len(niclocality._HELD) == len([p for p in lists if Path(p).exists()])
