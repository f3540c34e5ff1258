"""The nic collector keeps what an interface's sysfs node says (its device, uevent, queues
directory) while the node stands, and reads every scrape what changes under it (the MSI
vectors, the receive queues): a NIC added or removed, an interface replaced by another under
its name, a change of channels each show at the next scrape.

An interface removed and another registered under its name is a new sysfs node with a new
inode number (kernfs allocates them cyclically); ``replace_link`` makes the fixture tree's
entry a new inode the same way (an ext4 tree could give a removed symlink's number to the
next one)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dnsfleet.collectors import nic
from dnsfleet.config import parse
from dnsfleet.hostfs import HostFS, StrPath
from tests.harness import metrics
from tests.harness.hosttree import TREES, TreeWriter, add_pci_nic, add_queues, add_virtual_if
from tests.harness.metrics import of

pytestmark = pytest.mark.unit

CONFIG = parse({"targets": [], "host": {"resolver_process": "unbound"}}, source="test")


def tree(tmp_path: Path) -> tuple[TreeWriter, HostFS]:
    root = tmp_path / "x86"
    shutil.copytree(TREES / "x86", root, symlinks=True)
    return TreeWriter(root), HostFS(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root")


def nics(fs: HostFS) -> dict[str, nic.Nic]:
    return {n.name: n for n in nic.find_nics(fs, CONFIG)}


def replace_link(t: TreeWriter, rel: str, target: str) -> None:
    """The entry at ``rel`` now a new symlink to ``target``, made before the old one goes."""
    new = t.root / f"{rel}.new"
    os.symlink(target, new)
    os.replace(new, t.root / rel)


def test_a_nic_added_or_removed_shows_at_the_next_scrape(tmp_path: Path) -> None:
    t, fs = tree(tmp_path)
    before = nics(fs)
    assert "ens9f0" not in before and "eth1" in before
    add_pci_nic(t, "ens9f0", "0000:09:00.0", [200, 201, 202], "ice", queues=2)
    (t.root / "sys/class/net/eth1").unlink()
    after = nics(fs)
    assert set(after) == set(before) - {"eth1"} | {"ens9f0"}
    assert after["ens9f0"] == nic.Nic(
        "ens9f0", frozenset({"200", "201", "202"}), "0000:09:00.0", rx_queues=2
    )
    fams = of(nic.collect(fs, CONFIG))
    assert metrics.value(fams, "dnsfleet_nic_queue_vectors", device="eth1") is None
    assert metrics.value(fams, "dnsfleet_nic_queue_vectors", device="eth0") is not None


def test_an_interface_replaced_under_its_name_is_read_anew(tmp_path: Path) -> None:
    t, fs = tree(tmp_path)
    assert nics(fs)["eth1"].pci_slot == "0000:03:00.1"
    # eth1 goes and a veth is created under its name: no device, no interrupts.
    add_virtual_if(t, "eth1-veth")
    replace_link(t, "sys/class/net/eth1", "../../devices/virtual/net/eth1-veth")
    assert "eth1" not in nics(fs)
    # Then a NIC on another PCI function is named eth1.
    add_pci_nic(t, "eth1x", "0000:0a:00.0", [300, 301], "ixgbe", queues=1)
    replace_link(
        t, "sys/class/net/eth1", "../../devices/pci0000:00/0000:00:02.0/0000:0a:00.0/net/eth1x"
    )
    assert nics(fs)["eth1"] == nic.Nic("eth1", frozenset({"300", "301"}), "0000:0a:00.0", 1)


def test_channels_and_vectors_changed_under_the_same_interface_show_at_the_next_scrape(
    tmp_path: Path,
) -> None:
    t, fs = tree(tmp_path)
    add_pci_nic(t, "ens9f0", "0000:09:00.0", [200, 201, 202], "ice", queues=2)
    assert nics(fs)["ens9f0"].rx_queues == 2
    # ethtool -L combined 4: more queues, and the driver asks for more vectors.
    netdir = "sys/devices/pci0000:00/0000:00:02.0/0000:09:00.0/net/ens9f0"
    add_queues(t, netdir, 4)
    for irq in (203, 204):
        t.write(f"sys/devices/pci0000:00/0000:00:02.0/0000:09:00.0/msi_irqs/{irq}", "msix")
    got = nics(fs)["ens9f0"]
    assert (got.rx_queues, got.msi_irqs) == (4, frozenset({"200", "201", "202", "203", "204"}))
    # ethtool -L combined 1.
    for k in (1, 2, 3):
        shutil.rmtree(t.root / netdir / f"queues/rx-{k}")
    (t.root / "sys/devices/pci0000:00/0000:00:02.0/0000:09:00.0/msi_irqs/204").unlink()
    got = nics(fs)["ens9f0"]
    assert (got.rx_queues, got.msi_irqs) == (1, frozenset({"200", "201", "202", "203"}))


def test_a_second_scrape_stats_no_device_of_an_interface_it_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of keeping the layout: nothing per interface but its vectors and queues."""
    _, fs = tree(tmp_path)
    first = nics(fs)
    looked: list[str] = []
    real = HostFS.exists

    def exists(self: HostFS, path: StrPath) -> bool:
        looked.append(str(path))
        return real(self, path)

    monkeypatch.setattr(HostFS, "exists", exists)
    assert nics(fs) == first
    assert looked == []
