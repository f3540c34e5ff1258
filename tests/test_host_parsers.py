"""Pure parsers of the host collectors, on every shared real-world sample and our own."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from dnsfleet.parsers.bonding import (
    bond_from_sysfs,
    parse_bond_mode,
    parse_bond_proc,
)
from dnsfleet.parsers.cpuidle import (
    PM_QOS_NO_LIMIT_US,
    allowed,
    parse_cpu_dma_latency,
    parse_cpuidle_state,
    parse_resume_latency,
)
from dnsfleet.parsers.interrupts import parse_cpu_list, parse_interrupts, parse_softirqs
from dnsfleet.parsers.nic import is_queue_vector, matches_interface, vector_name
from dnsfleet.parsers.procstat import parse_stat_processor
from tests.harness.hosttree import FIXTURES

pytestmark = pytest.mark.unit

SHARED = FIXTURES / "shared"
OWN_BONDING = FIXTURES / "bonding"


def test_every_shared_sample_has_a_test() -> None:
    """A new file in the shared fixtures must be added to a test here."""
    covered = {
        "interrupts/x86-virtio-2cpu.txt",
        "interrupts/aarch64-ena-8cpu.txt",
        "cpuidle/state3-acpi.txt",
        "bonding/sysfs-tree.txt",
        "bonding/round-robin-kernel-doc.txt",
        "bonding/active-backup-one-down.txt",
        "bonding/lacp-partner-churned.txt",
        "resolver-stats/unbound-stats-excerpt.txt",
    }  # resolver statistics, not a host file
    found = {str(p.relative_to(SHARED)) for p in SHARED.rglob("*.txt")}
    assert found == covered


# ------------------------------------------------------------------ /proc/interrupts


def test_interrupts_aarch64_label_glued_to_counts() -> None:
    ints = parse_interrupts((SHARED / "interrupts" / "aarch64-ena-8cpu.txt").read_text())
    assert ints.cpus == tuple(range(8))
    by = ints.by_irq()
    assert by["IPI0"].counts[0] == 2768808080
    assert by["IPI0"].total == sum(
        [
            2768808080,
            2844211768,
            2878602432,
            2730576120,
            2723524623,
            3349096412,
            2717389879,
            2154252810,
        ]
    )
    assert by["58"].actions == "eth0-Tx-Rx-0"
    assert by["58"].counts == (0, 0, 1195697946, 437, 0, 0, 0, 0)
    assert by["57"].actions == "ena-mgmnt@pci:0000:00:05.0"
    assert by["Err"].counts == (0,)
    assert len(ints.lines) == 11


def test_interrupts_x86_virtio() -> None:
    ints = parse_interrupts((SHARED / "interrupts" / "x86-virtio-2cpu.txt").read_text())
    assert ints.cpus == (0, 1)
    by = ints.by_irq()
    assert by["24"].actions == "ACPI:Ged"  # a colon inside the action name
    assert by["38"].actions == "virtio2-input.0"
    assert by["38"].counts == (0, 2273)
    assert by["38"].description == "PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0"
    assert by["LOC"].counts == (55516, 57990)
    assert by["ERR"].counts == (0,) and by["MIS"].counts == (0,)
    assert by["PIW"].description == "Posted-interrupt wakeup event"


def test_interrupts_counts_only_for_requested_irqs() -> None:
    text = (SHARED / "interrupts" / "x86-virtio-2cpu.txt").read_text()
    ints = parse_interrupts(text, counts_for={"38", "39"})
    by = ints.by_irq()
    assert by["38"].counts == (0, 2273) and by["39"].counts == (1924, 0)
    assert by["36"].counts == () and by["36"].actions == "virtio1-req.0"
    assert by["LOC"].counts == ()


def test_interrupts_offline_cpu_columns_and_shared_actions() -> None:
    text = (
        "           CPU0       CPU2\n"
        " 16:        10         20   IO-APIC  16-fasteoi   ehci_hcd:usb1, eth9\n"
        "NMI:         0          0   Non-maskable interrupts\n"
    )
    ints = parse_interrupts(text)
    assert ints.cpus == (0, 2)
    assert ints.by_irq()["16"].actions == "ehci_hcd:usb1, eth9"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage\n",
        "           CPU0       CPU1\n 24:          1   IO-APIC   5-edge      ACPI:Ged\n",
        "           CPU0       CPU1\n 24:          1       x   IO-APIC 5-edge ACPI:Ged\n",
        "           CPU0       CPU1\nthis line has no label\n",
    ],
)
def test_interrupts_garbage_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_interrupts(text)


def test_softirqs() -> None:
    text = (
        "                    CPU0       CPU1\n"
        "          HI:          0          0\n"
        "      NET_RX:       3515       4520\n"
        "       BLOCK:          0      42305\n"
    )
    s = parse_softirqs(text, only=("NET_RX",))
    assert s.cpus == (0, 1) and s.counts == {"NET_RX": (3515, 4520)}
    with pytest.raises(ValueError):
        parse_softirqs("                    CPU0       CPU1\n      NET_RX:       35\n")


def test_softirqs_of_this_machine() -> None:
    text = Path("/proc/softirqs").read_text()
    s = parse_softirqs(text)
    assert "NET_RX" in s.counts and len(s.cpus) == os.cpu_count()


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
        ("5", {5}),
        ("", set()),
        ("0-1\n", {0, 1}),
        ("0-7:2/4", {0, 1, 4, 5}),
    ],
)
def test_cpu_list(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == frozenset(cpus)


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "1,,2", "0-7:2/0"])
def test_cpu_list_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)


# ------------------------------------------------------------------ NIC vector names


@pytest.mark.parametrize(
    ("action", "ifname", "queue"),
    [
        ("eth0-TxRx-3", "eth0", True),
        ("eth0-Tx-Rx-3", "eth0", True),
        ("i40e-eth0-TxRx-3", "eth0", True),
        ("mlx5_comp3@pci:0000:08:00.0", "ens1f0np0", True),
        ("virtio2-input.0", "eth0", True),
        ("virtio2-output.0", "eth0", True),
        ("uplink0-TxRx-1", "uplink0", True),  # "link" in the interface name
        ("eth0", "eth0", False),  # ixgbe's link/other vector
        ("mlx5_async0@pci:0000:08:00.0", "ens1f0np0", False),
        ("ena-mgmnt@pci:0000:00:05.0", "eth0", False),
        ("virtio2-config", "eth0", False),
        ("i40e-0000:3b:00.0:misc", "eth0", False),
        ("eth0-event-4", "eth0", False),
    ],
)
def test_queue_vectors(action: str, ifname: str, queue: bool) -> None:
    assert is_queue_vector(action, ifname) is queue


def test_name_fallback_mapping() -> None:
    assert matches_interface("eth0-Tx-Rx-1", ifname="eth0", pci_slot=None)
    assert not matches_interface("eth01-TxRx-1", ifname="eth0", pci_slot=None)
    assert matches_interface("ice-eth0-TxRx-1", ifname="eth0", pci_slot=None)
    assert matches_interface("mlx5_comp1@pci:0000:08:00.1", ifname="p2", pci_slot="0000:08:00.1")
    assert not matches_interface(
        "mlx5_comp1@pci:0000:08:00.0", ifname="p2", pci_slot="0000:08:00.1"
    )
    assert vector_name("mlx5_comp1@pci:0000:08:00.1") == "mlx5_comp1"


# ------------------------------------------------------------------ bonding


def bond_text(path: Path) -> str:
    return path.read_text()


def test_bond_round_robin_kernel_doc() -> None:
    b = parse_bond_proc("bond0", bond_text(SHARED / "bonding" / "round-robin-kernel-doc.txt"))
    assert b.mode == "balance-rr"
    assert [s.name for s in b.slaves] == ["eth1", "eth0"]
    assert b.slaves_up == 2
    assert [s.link_failures for s in b.slaves] == [1, 1]
    assert b.miimon_ms == 1000 and b.arp_interval_ms == 0
    assert b.active_slave == "eth0"


def test_bond_active_backup_one_down() -> None:
    b = parse_bond_proc("bond0", bond_text(SHARED / "bonding" / "active-backup-one-down.txt"))
    assert b.mode == "active-backup"
    assert b.active_slave == "eth2"
    assert [(s.name, s.up, s.link_failures) for s in b.slaves] == [
        ("eth3", False, 2),
        ("eth2", True, 0),
    ]
    assert b.miimon_ms == 100


def test_bond_lacp_partner_churned() -> None:
    b = parse_bond_proc("bond0", bond_text(SHARED / "bonding" / "lacp-partner-churned.txt"))
    assert b.mode == "802.3ad"
    assert b.aggregator_id == 1 and b.partner_mac == "8a:a3:b3:dc:c5:fb"
    eth1, eth2 = b.slaves
    assert (eth1.aggregator_id, eth1.actor_churn_state, eth1.partner_churn_state) == (
        1,
        "none",
        "churned",
    )
    assert (eth1.actor_churned, eth1.partner_churned) == (0, 1)
    assert eth1.partner_system_mac == "8a:a3:b3:dc:c5:fb"
    assert eth2.partner_churn_state == "none"


def test_bond_arp_monitored() -> None:
    b = parse_bond_proc("bond0", bond_text(OWN_BONDING / "arp-monitored.txt"))
    assert (b.miimon_ms, b.arp_interval_ms) == (0, 1000)
    assert b.arp_targets == ("192.0.2.1", "192.0.2.2")
    assert b.slaves[1].link_failures == 3


def test_bond_all_slaves_down() -> None:
    b = parse_bond_proc("bond1", bond_text(OWN_BONDING / "all-slaves-down.txt"))
    assert b.active_slave is None
    assert b.slaves_up == 0 and len(b.slaves) == 2


def test_bond_lacp_aggregator_mismatch() -> None:
    b = parse_bond_proc("bond1", bond_text(OWN_BONDING / "lacp-aggregator-mismatch.txt"))
    assert b.aggregator_id == 1
    assert [s.aggregator_id for s in b.slaves] == [1, 2]
    assert b.slaves[1].partner_system_mac == "00:00:00:00:00:00"
    assert b.slaves[1].actor_churn_state == "churned"


def test_bond_no_monitoring() -> None:
    b = parse_bond_proc("bond2", bond_text(OWN_BONDING / "no-monitoring.txt"))
    assert b.mode == "balance-xor" and b.miimon_ms == 0 and b.arp_interval_ms == 0


@pytest.mark.parametrize(
    "text",
    [
        "Ethernet Channel Bonding Driver: v6\n\nBonding Mode: quantum entanglement\n",
        "Ethernet Channel Bonding Driver: v6\n\nMII Status: up\n",
        "Bonding Mode: fault-tolerance (active-backup)\nMII Polling Interval (ms): fast\n",
        "Bonding Mode: fault-tolerance (active-backup)\n\nSlave Interface: eth0\nSpeed: 1\n",
        "\x00\x01binary garbage",
    ],
)
def test_bond_proc_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bond_proc("bond0", text)


def sysfs_tree() -> dict[str, str]:
    out = {}
    for line in (SHARED / "bonding" / "sysfs-tree.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        path, _, content = line.partition(":")
        out[path.strip()] = content.strip()
    return out


def test_bond_sysfs_tree_of_node_exporter() -> None:
    """The fixture's expectation: bond0 0 slaves/0 up, dmz 2/2, int 2/1."""
    tree = sysfs_tree()
    got = {}
    for bond in tree["sys/class/net/bonding_masters"].split():
        base = f"sys/class/net/{bond}"
        bonding = {"slaves": tree.get(f"{base}/bonding/slaves")}
        slaves = {
            s: {"mii_status": tree.get(f"{base}/slave_{s}/bonding_slave/mii_status")}
            for s in (bonding["slaves"] or "").split()
        }
        b = bond_from_sysfs(bond, bonding=bonding, slaves=slaves)
        got[bond] = (len(b.slaves), b.slaves_up)
    assert got == {"bond0": (0, 0), "dmz": (2, 2), "int": (2, 1)}


def test_bond_sysfs_values() -> None:
    assert parse_bond_mode("802.3ad 4\n") == "802.3ad"
    assert parse_bond_mode("active-backup 1") == "active-backup"
    with pytest.raises(ValueError):
        parse_bond_mode("802.3ad")
    b = bond_from_sysfs(
        "bond0",
        bonding={
            "mode": "802.3ad 4",
            "slaves": "eth0 eth1",
            "miimon": "100",
            "arp_interval": "0",
            "ad_aggregator": "3",
            "ad_partner_mac": "00:00:00:00:00:00",
            "active_slave": "",
        },
        slaves={
            "eth0": {"mii_status": "up", "link_failure_count": "4", "ad_aggregator_id": "3"},
            "eth1": {"mii_status": "down", "ad_aggregator_id": "4"},
        },
    )
    assert (b.mode, b.miimon_ms, b.aggregator_id, b.partner_mac, b.active_slave) == (
        "802.3ad",
        100,
        3,
        "00:00:00:00:00:00",
        None,
    )
    assert [(s.up, s.link_failures, s.aggregator_id) for s in b.slaves] == [
        (True, 4, 3),
        (False, None, 4),
    ]
    with pytest.raises(ValueError):
        bond_from_sysfs("bond0", bonding={"miimon": "x"}, slaves={})


# ------------------------------------------------------------------ cpuidle, PM QoS, stat


def state_files(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def test_cpuidle_acpi_c3() -> None:
    s = parse_cpuidle_state(state_files(SHARED / "cpuidle" / "state3-acpi.txt"))
    assert (s.name, s.latency_us, s.residency_us, s.disabled) == ("C3", 350, 700, False)
    assert (s.time_us, s.usage) == (185600277204, 50200069)
    assert s.desc == "ACPI IOPORT 0x415"
    lat = s.latency_us
    assert allowed(latency_us=lat, disabled=s.disabled, limit_us=PM_QOS_NO_LIMIT_US)
    assert not allowed(latency_us=lat, disabled=s.disabled, limit_us=349)
    assert allowed(latency_us=lat, disabled=s.disabled, limit_us=350)


def test_cpuidle_disabled_and_garbage() -> None:
    files = state_files(SHARED / "cpuidle" / "state3-acpi.txt")
    s = parse_cpuidle_state({**files, "disable": "1"})
    assert s.disabled
    assert not allowed(latency_us=s.latency_us, disabled=True, limit_us=PM_QOS_NO_LIMIT_US)
    for key, bad in (("latency", "soon"), ("usage", "-1"), ("name", "")):
        with pytest.raises(ValueError):
            parse_cpuidle_state({**files, key: bad})
    missing = dict(files)
    del missing["time"]
    with pytest.raises(ValueError):
        parse_cpuidle_state(missing)


def test_cpu_dma_latency() -> None:
    assert parse_cpu_dma_latency(struct.pack("=i", 2_000_000_000)) == PM_QOS_NO_LIMIT_US
    assert parse_cpu_dma_latency(struct.pack("=i", 20)) == 20
    for bad in (b"", b"\x01\x02", b"12345", struct.pack("=i", -1)):
        with pytest.raises(ValueError):
            parse_cpu_dma_latency(bad)


def test_cpu_dma_latency_of_this_machine() -> None:
    """Root-only; opening it adds a default request that does not lower the limit."""
    try:
        data = Path("/dev/cpu_dma_latency").read_bytes()
    except PermissionError:
        pytest.skip("not root")
    assert 0 <= parse_cpu_dma_latency(data) <= PM_QOS_NO_LIMIT_US


def test_resume_latency() -> None:
    assert parse_resume_latency("0\n") is None
    assert parse_resume_latency("n/a\n") == 0
    assert parse_resume_latency("150") == 150
    with pytest.raises(ValueError):
        parse_resume_latency("-3")


def test_stat_processor() -> None:
    line = (
        "6733 (cat) R 6641 6641 4718 0 -1 4194304 126 0 0 0 0 0 0 0 20 0 1 0 59694 "
        "3133440 362 18446744073709551615 94278415319040 94278415338921 140729584631392 "
        "0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94278415354928 94278415356544 94278996369408 "
        "140729584638649 140729584638679 140729584638679 140729584639979 0"
    )
    assert parse_stat_processor(line) == 1
    # A comm with spaces and parentheses.
    assert parse_stat_processor(line.replace("(cat)", "(a) b (c)")) == 1
    with pytest.raises(ValueError):
        parse_stat_processor("12 (x) S 1 2 3")
    own = Path(f"/proc/self/task/{os.getpid()}/stat").read_text()
    assert 0 <= parse_stat_processor(own) < (os.cpu_count() or 1)
