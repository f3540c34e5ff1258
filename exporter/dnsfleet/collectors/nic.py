"""NIC queue interrupts: how a NIC's queue IRQs spread over CPUs, and how close they are to
the resolver's threads.

Series per NIC are O(queues + CPUs), never queues x CPUs: one counter per queue (summed over
CPUs), one counter per CPU (summed over the NIC's queues, only CPUs that took at least one),
one affinity gauge per queue. node_exporter's interrupts collector emits CPUs x IRQs and is
off by default for that reason.

Locality (only with ``host.resolver_process``): the CPUs the resolver's threads last ran on
(``processor`` in /proc/<pid>/task/<tid>/stat, a snapshot taken at scrape time) against the
CPUs that effectively serve each NIC's queue interrupts, and whether they share a cache
(``cpuN/cache/indexK/shared_cpu_list``). A worker sharing L2/L3 with the interrupt core ran
45-65% faster in a published DNS echo-server study.

What a scrape reads and what it keeps: every change below shows at the next scrape, none
later. The vectors' counts (/sys/kernel/irq, else /proc/interrupts), /proc/softirqs and the
listings of /sys/class/net, /proc and the resolver's tasks are read every scrape. Kept: an
interface's layout (device, uevent, queues directory) while its /sys/class/net entry keeps
its inode number, so an interface added, removed or registered anew under a name is seen,
and its MSI vectors and rx queues are listed every scrape (ethtool -L); the caches the
resolver's CPUs share while ``online`` and ``present`` stand. Held open and read again at
offset 0 (hostfs.HeldFiles): the vectors' sysfs counts and names, their affinity lists,
every process's comm (a process that exec()s under its PID shows its new name; a gone
process's held read fails, ESRCH, also when its PID went to another, and the path is
opened afresh) and the resolver threads' stat (see niclocality.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from dnsfleet.collectors.base import CollectorError, host_collector
from dnsfleet.collectors.niclocality import (
    cache_domains,
    cpu_list,
    irq_affinities,
    process_pids,
    sysfs_interrupts,
    thread_cpus,
)
from dnsfleet.config import Config
from dnsfleet.exposition import Family, Labels
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.interrupts import IrqLine, parse_interrupts, parse_softirqs
from dnsfleet.parsers.nic import is_queue_vector, matches_interface, vector_name


@dataclass(frozen=True)
class Nic:
    name: str
    msi_irqs: frozenset[str]  # empty: no msi_irqs in sysfs, map by name
    pci_slot: str | None
    # Receive queues (RSS channels) from /sys/class/net/<if>/queues/rx-N; None when the
    # directory is absent. Not the vector count: virtio_net with one rx/tx pair has two
    # queue vectors (input.0, output.0) but one receive queue.
    rx_queues: int | None = None


@dataclass(frozen=True)
class Queue:
    irq: str
    label: str
    total: int
    affinity: frozenset[int] | None  # smp_affinity_list
    effective: frozenset[int] | None  # effective_affinity_list (smp_affinity_list before 4.13)


@dataclass
class NicIrqs:
    nic: Nic
    queues: list[Queue] = field(default_factory=list)
    per_cpu: dict[int, int] = field(default_factory=dict)

    @property
    def irq_cpus(self) -> frozenset[int]:
        out: set[int] = set()
        for q in self.queues:
            out |= q.effective or frozenset()
        return frozenset(out)


def _uevent(text: str | None, key: str) -> str | None:
    for line in (text or "").splitlines():
        k, _, v = line.partition("=")
        if k == key:
            return v.strip()
    return None


@dataclass(frozen=True, slots=True)
class _Layout:
    """What an interface's sysfs node says while it stands: its device directory (None: a
    virtual interface, no interrupts of its own), the PCI function above a virtio_net
    device, each one's PCI_SLOT_NAME, and whether it has a queues directory."""

    dev: str | None
    virtio_parent: str | None = None
    pci_slot: str | None = None
    parent_slot: str | None = None
    has_queues: bool = False


# The interfaces' layouts of the host tree read last, by (name, inode number of the
# /sys/class/net entry). An interface's device, its uevent and its queues directory stay
# while its sysfs node does; an interface removed and another registered under its name is
# a new kernfs node, whose inode number kernfs allocates cyclically (never the old one's),
# so the listing of /sys/class/net each scrape tells both apart. Read every scrape still:
# the MSI vectors and receive queues, which ethtool -L and a driver's reset change under
# the same node. A Kubernetes node's hundreds of veths cost a stat of ``device`` each (a
# walk through sysfs symlinks, ~20 us) every scrape before. One entry: one host tree.
_LAYOUTS: dict[HostFS, dict[tuple[str, int], _Layout]] = {}


def _layout(fs: HostFS, name: str) -> _Layout:
    dev = f"{fs.sys('class', 'net', name)}/device"
    if not fs.exists(dev):
        return _Layout(None)  # virtual interface (bond, bridge, veth, lo)
    uevent = fs.read_optional(f"{dev}/uevent")
    parent = None
    if (_uevent(uevent, "MODALIAS") or "").startswith("virtio:"):
        # virtio_net's device is the virtioN bus device; its vectors belong to the
        # virtio PCI function above it.
        parent = f"{dev}/.."
    return _Layout(
        dev,
        virtio_parent=parent,
        pci_slot=_uevent(uevent, "PCI_SLOT_NAME"),
        parent_slot=_uevent(fs.read_optional(f"{parent}/uevent"), "PCI_SLOT_NAME")
        if parent
        else None,
        has_queues=fs.exists(f"{fs.sys('class', 'net', name)}/queues"),
    )


def find_nics(fs: HostFS, config: Config) -> list[Nic]:
    include = re.compile(config.host.nic_include)
    exclude = re.compile(config.host.nic_exclude) if config.host.nic_exclude else None
    known = _LAYOUTS.get(fs, {})
    layouts: dict[tuple[str, int], _Layout] = {}
    nics = []
    net = str(fs.sys("class", "net"))
    for entry in fs.entries(net):
        name = entry[0]
        if not include.fullmatch(name) or (exclude and exclude.fullmatch(name)):
            continue
        lay = layouts[entry] = known.get(entry) or _layout(fs, name)
        if lay.dev is None:
            continue
        irqs = fs.listdir(f"{lay.dev}/msi_irqs")
        slot = lay.pci_slot
        if not irqs and lay.virtio_parent is not None:
            irqs = fs.listdir(f"{lay.virtio_parent}/msi_irqs")
            slot = lay.parent_slot
        rx = [q for q in fs.listdir(f"{net}/{name}/queues") if q.startswith("rx-")]
        nics.append(
            Nic(
                name=name,
                msi_irqs=frozenset(i for i in irqs if i.isdigit()),
                pci_slot=slot,
                rx_queues=len(rx) if lay.has_queues else None,
            )
        )
    _LAYOUTS.clear()
    _LAYOUTS[fs] = layouts
    return nics


def nic_irqs(fs: HostFS, nics: list[Nic]) -> tuple[list[NicIrqs], list[int]]:
    """Each NIC's queue IRQs with counts and affinities, and the online CPUs."""
    by_msi = all(n.msi_irqs for n in nics)
    wanted = frozenset().union(*(n.msi_irqs for n in nics)) if by_msi else None
    ints = sysfs_interrupts(fs, wanted) if wanted else None
    if ints is None:
        ints = parse_interrupts(fs.read_text(fs.proc("interrupts")), counts_for=wanted)
    lines = ints.by_irq()
    out = []
    per_nic: list[tuple[Nic, list[IrqLine]]] = []
    for nic in nics:
        if nic.msi_irqs:
            candidates = [lines[i] for i in sorted(nic.msi_irqs, key=int) if i in lines]
        else:
            candidates = [
                ln
                for ln in ints.lines
                if ln.irq.isdigit()
                and matches_interface(ln.actions, ifname=nic.name, pci_slot=nic.pci_slot)
            ]
        per_nic.append((nic, [ln for ln in candidates if is_queue_vector(ln.actions, nic.name)]))
    # The affinities are settings (irqbalance rewrites them): read every scrape, all NICs'
    # at once (a read holds what it asks for and lets go of the rest).
    lists = iter(irq_affinities(fs, [ln.irq for _, queue_lines in per_nic for ln in queue_lines]))
    for nic, queue_lines in per_nic:
        result = NicIrqs(nic)
        seen: set[str] = set()
        counts: list[tuple[int, ...]] = []
        for ln in queue_lines:
            label = vector_name(ln.actions)
            if label in seen:
                label = f"{label}#{ln.irq}"
            seen.add(label)
            affinity = cpu_list(next(lists))
            effective = cpu_list(next(lists))
            result.queues.append(
                Queue(
                    irq=ln.irq,
                    label=label,
                    total=sum(ln.counts),
                    affinity=affinity,
                    effective=effective if effective is not None else affinity,
                )
            )
            counts.append(ln.counts)
        if result.queues:
            # Column sums in C (zip(*rows)): a per-element Python loop over 32 queues x 128
            # CPUs per NIC costs milliseconds.
            for cpu, total in zip(ints.cpus, map(sum, zip(*counts, strict=True)), strict=True):
                if total:
                    result.per_cpu[cpu] = total
            out.append(result)
    return out, list(ints.cpus)


def collect(fs: HostFS, config: Config) -> list[Family]:
    try:
        return _collect(fs, config)
    except (HostReadError, ValueError) as e:
        raise CollectorError(str(e)) from e
    except FileNotFoundError as e:
        raise CollectorError(f"{e.filename}: missing") from e


def _collect(fs: HostFS, config: Config) -> list[Family]:
    nics = find_nics(fs, config)
    nic_data: list[NicIrqs] = []
    if fs.exists(fs.proc("interrupts")):
        nic_data, _ = nic_irqs(fs, nics) if nics else ([], [])
    return [
        *_queue_families(nic_data),
        *_softirq_families(fs),
        *_process_part(fs, config.host.resolver_process, nic_data),
    ]


def _queue_families(nic_data: list[NicIrqs]) -> list[Family]:
    """Pure: the NICs' queue vectors, their interrupts and affinity -> families."""
    queues = Family(
        "dnsfleet_nic_queues", "Receive queues of the NIC (/sys/class/net/<if>/queues/rx-N)."
    )
    vectors = Family(
        "dnsfleet_nic_queue_vectors",
        "Interrupt vectors serving the NIC's queues (one per rx/tx pair on most "
        "drivers, one per direction on virtio_net).",
    )
    q_total = Family(
        "dnsfleet_nic_queue_interrupts_total",
        "Interrupts taken by the queue's vector, summed over CPUs.",
        "counter",
    )
    c_total = Family(
        "dnsfleet_nic_cpu_interrupts_total",
        "Interrupts of the NIC's queue vectors taken by the CPU, summed over "
        "queues (CPUs that never took one are absent).",
        "counter",
    )
    aff = Family(
        "dnsfleet_nic_queue_affinity_cpus",
        "CPUs allowed to take the queue's interrupt (smp_affinity_list).",
    )
    irq_cpus = Family(
        "dnsfleet_nic_irq_cpus",
        "Distinct CPUs that effectively serve the NIC's queue interrupts "
        "(effective_affinity_list).",
    )
    for d in nic_data:
        dev = d.nic.name
        dl = _labels(("device", dev))
        if d.nic.rx_queues is not None:
            queues.add_raw(dl, d.nic.rx_queues)
        vectors.add_raw(dl, len(d.queues))
        for q in d.queues:
            ql = _labels(("device", dev), ("queue", q.label))
            q_total.add_raw(ql, q.total)
            if q.affinity is not None:
                aff.add_raw(ql, len(q.affinity))
        for cpu in sorted(d.per_cpu):
            c_total.add_raw(_labels(("device", dev), ("cpu", str(cpu))), d.per_cpu[cpu])
        if any(q.effective is not None for q in d.queues):
            irq_cpus.add_raw(dl, len(d.irq_cpus))
    return [queues, vectors, q_total, c_total, aff, irq_cpus]


# The label sets of the queue and CPU series, made once: a 128-CPU host's ~550 series a
# scrape each escaped and joined its labels anew (Labels are immutable). Bounded by the
# host's NICs, queues and CPUs; the cache lets go of the oldest past that.
@functools.lru_cache(maxsize=8192)
def _labels(*pairs: tuple[str, str]) -> Labels:
    return Labels(pairs)


def _softirq_families(fs: HostFS) -> list[Family]:
    fams: list[Family] = []
    softirqs = fs.read_optional(fs.proc("softirqs"))
    if softirqs is not None:
        parsed = parse_softirqs(softirqs, only=("NET_RX",))
        net_rx = Family(
            "dnsfleet_softirq_net_rx_total",
            "NET_RX softirqs run on the CPU (receive packet processing).",
            "counter",
        )
        for cpu, n in zip(parsed.cpus, parsed.counts.get("NET_RX", ()), strict=False):
            net_rx.add_raw(_labels(("cpu", str(cpu))), n)
        fams.append(net_rx)
    return fams


def _process_part(fs: HostFS, resolver: str | None, nic_data: list[NicIrqs]) -> list[Family]:
    """irqbalance, and the resolver's process with its locality to the NIC's queues."""
    fams: list[Family] = []
    names = ["irqbalance", *([resolver] if resolver else [])]
    pids = process_pids(fs, names)
    fams.append(
        Family("dnsfleet_irqbalance_running", "1 if an irqbalance process is running.").add(
            1 if pids["irqbalance"] else 0
        )
    )
    if resolver:
        # Several processes may carry the name (two instances, a helper that shares the
        # comm): their threads are not one resolver's. Take the process with the most
        # threads as the resolver and say how many there were.
        per_pid = thread_cpus(fs, pids[resolver])
        main = max(per_pid, key=len, default=[])
        fams += process_families(resolver, processes=len(per_pid), cpus=main)
        if main:
            fams += locality_families(fs, resolver, main, nic_data)
    return fams


def locality_families(
    fs: HostFS, process: str, cpus: list[int], nic_data: list[NicIrqs]
) -> list[Family]:
    """The NIC side of locality: the resolver's CPUs against those serving each NIC's
    queue interrupts (the resolver's own families are collectors/resolver.py's)."""
    ran_on = frozenset(cpus)
    shared = Family(
        "dnsfleet_nic_resolver_shared_cpus",
        "CPUs that both ran a resolver thread and serve the NIC's queue interrupts.",
    )
    local = Family(
        "dnsfleet_nic_resolver_cache_local_threads",
        "Resolver threads whose CPU shares a cache of this level with a CPU "
        "serving the NIC's queue interrupts.",
    )
    domains = cache_domains(fs, sorted(ran_on)) if nic_data else {}
    levels = sorted({lvl for d in domains.values() for lvl in d})
    for d in nic_data:
        serving = d.irq_cpus
        if not serving:
            continue
        dl = {"device": d.nic.name, "process": process}
        shared.add(len(ran_on & serving), dl)
        for level in levels:
            local.add(
                sum(1 for c in cpus if not serving.isdisjoint(domains[c].get(level, ()))),
                {**dl, "level": level},
            )
    return [shared, local]


COLLECTOR = host_collector("nic", collect)


def process_families(process: str, *, processes: int, cpus: list[int]) -> list[Family]:
    """Pure: the configured resolver process on this host. ``processes`` carry its name;
    ``cpus`` are the CPUs the threads of the one with the most threads last ran on."""
    pl = {"process": process}
    fams = [
        Family(
            "dnsfleet_resolver_processes",
            "Processes named like the configured resolver process; the thread and "
            "locality metrics describe the one with the most threads.",
        ).add(processes, pl),
        Family(
            "dnsfleet_resolver_threads",
            "Threads of the configured resolver process (0: not running); of the one "
            "with the most threads when several share the name.",
        ).add(len(cpus), pl),
    ]
    if cpus:
        fams.append(
            Family(
                "dnsfleet_resolver_cpus", "Distinct CPUs the resolver's threads last ran on."
            ).add(len(frozenset(cpus)), pl)
        )
    return fams
