"""What the nic collector reads of the host besides /proc/interrupts: the IRQs' affinity
lists (held open between scrapes), the processes and threads of the resolver, and the CPUs'
cache sharing (kept while the CPUs stand)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence

from dnsfleet.collectors.treeheld import TreeHeld
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.interrupts import (
    Interrupts,
    IrqLine,
    parse_cpu_list,
    parse_per_cpu_count,
)
from dnsfleet.parsers.procstat import parse_stat_processor

# Under /proc/irq/<irq>: where the IRQ may go, and where it goes (4.13 and later).
AFFINITY = ("smp_affinity_list", "effective_affinity_list")

# Under cpuN/cache/indexK.
CACHE_FILES = ("type", "level", "shared_cpu_list")


def cpu_list(data: bytes | None) -> frozenset[int] | None:
    return None if data is None else _parse_cpu_list(data.decode("utf-8", errors="replace"))


# A large host's IRQs and caches repeat a few CPU lists ("0-127", one CPU each): parsed
# once per distinct text (the parser is pure and its sets are frozen).
_parse_cpu_list = functools.lru_cache(maxsize=1024)(parse_cpu_list)


# The comm files of the host tree read last, held open (hostfs.HeldFiles), with the PIDs
# and paths they were read for. /proc/<pid>/comm shows the task's name as it is at each
# read (comm_show in fs/proc/base.c, a single_open seq_file: a pread at offset 0 shows it
# again), so a process that exec()s under its PID (a wrapper script that becomes the
# resolver) shows its new name through the held descriptor at the next scrape. The
# descriptor's inode holds the process's struct pid, not its number: once that process is
# gone its read fails (ESRCH, also when the number went to a new process) and the path is
# opened afresh, which finds the PID's new process or nothing. A scrape is one listing of
# /proc (new processes) and one pread per process, where it was an open, a read and a close
# (about a third of the cost, and of a 2,000-process host's ms).
_COMMS = TreeHeld()


def process_pids(fs: HostFS, names: Iterable[str]) -> dict[str, list[int]]:
    """PIDs by comm for the given process names, in one pass over /proc."""
    want = {n.encode("utf-8"): n for n in names}
    found: dict[str, list[int]] = {n: [] for n in want.values()}
    pids = list(fs.pids())
    # A process that exited between listing and reading (ESRCH) reads as missing.
    comms = _COMMS.read(
        fs,
        lambda: [f"{fs.procfs}/{pid}/comm" for pid in pids],
        key=pids,  # the same processes as last scrape: the same paths
        prune=True,
        unreadable_as_missing=True,
    )
    for pid, comm in zip(pids, comms, strict=True):
        if comm is not None and (name := want.get(comm.rstrip(b"\n"))) is not None:
            found[name].append(pid)
    return found


# The stat files of the resolver's threads on the host tree read last, held open, with
# their paths. /proc/<pid>/task/<tid>/stat is a single_open seq_file (proc_single_show): a
# pread at offset 0 shows the thread as it is now (``processor`` moves with every
# migration); a thread that exits fails the held read (ESRCH, its struct pid gone) and its
# path, opened afresh, is missing. A line is ~300 bytes: THREAD_STAT_READ holds any.
# Listed every scrape: threads come and go. One entry: one host tree.
THREAD_STAT_READ = 2048
_THREADS = TreeHeld(size=THREAD_STAT_READ)


def thread_cpus(fs: HostFS, pids: list[int]) -> list[list[int]]:
    """For each process in turn, the CPU each of its threads last ran on."""
    proc = str(fs.proc())
    paths: list[str] = []
    counts = []
    for pid in pids:
        task = f"{proc}/{pid}/task"
        tids = fs.listdir(task)
        paths += [f"{task}/{t}/stat" for t in tids]
        counts.append(len(tids))
    # A thread that exited between listing and reading reads as missing.
    stats = iter(_THREADS.read(fs, lambda: paths, prune=True, unreadable_as_missing=True))
    out = []
    for n in counts:
        cpus = []
        for stat in itertools.islice(stats, n):
            if stat is not None:
                cpus.append(parse_stat_processor(stat.decode("utf-8", errors="replace")))
        out.append(cpus)
    return out


# CPU -> cache level -> CPUs sharing it, for the host tree read last, while its CPUs stand:
# the kernel rewrites shared_cpu_list only when a CPU comes or goes (cacheinfo's hotplug
# callbacks), which rewrites ``online`` too. Read each scrape, they were ~200 files.
_CACHES: dict[HostFS, tuple[object, dict[int, dict[str, frozenset[int]]]]] = {}


def cache_domains(fs: HostFS, cpus: Iterable[int]) -> dict[int, dict[str, frozenset[int]]]:
    """CPU -> cache level -> the CPUs sharing that level's data or unified cache with it.
    Sharing is symmetric, so reading the resolver's few CPUs answers "does this thread share
    a cache with an interrupt CPU" without reading the topology of every CPU."""
    base = str(fs.sys("devices", "system", "cpu"))
    key = (fs.read_optional(f"{base}/online"), fs.read_optional(f"{base}/present"))
    entry = _CACHES.get(fs)
    if entry is None or entry[0] != key:
        entry = (key, {})
        _CACHES.clear()
        _CACHES[fs] = entry
    known = entry[1]
    out: dict[int, dict[str, frozenset[int]]] = {}
    for cpu in cpus:
        if cpu not in known:
            known[cpu] = _cache_levels(fs, f"{base}/cpu{cpu}/cache")
        out[cpu] = known[cpu]
    return out


def _cache_levels(fs: HostFS, cache: str) -> dict[str, frozenset[int]]:
    levels: dict[str, set[int]] = {}
    indexes = [i for i in fs.listdir(cache) if i.startswith("index")]
    files = fs.read_many(cache, [f"{i}/{f}" for i in indexes for f in CACHE_FILES])
    for k in range(0, len(files), len(CACHE_FILES)):
        typ, level, shared = files[k : k + len(CACHE_FILES)]
        lvl = (level or b"").strip().decode("ascii", errors="replace")
        if (typ or b"").strip() == b"Instruction" or not lvl.isdigit():
            continue
        if (cpus := cpu_list(shared)) is not None:
            levels.setdefault(lvl, set()).update(cpus)
    return {k: frozenset(v) for k, v in sorted(levels.items())}


# /sys/kernel/irq/<irq>/{actions,per_cpu_count} (Linux 4.17+) of the NICs' MSI vectors and
# the CPU sets, held open and read again at offset 0 (sysfs attributes), with their paths.
# /proc/interrupts is made whole on every read, every IRQ on every online CPU (56 us of
# kernel time a scrape on a 2-CPU VM for 35 lines; ~300 KB of text on a 128-CPU host with
# 350 IRQs) where the collector wants its vectors' counts only. per_cpu_count has a count
# per possible CPU; the online CPUs' are /proc/interrupts' columns. A page holds it for a
# few hundred CPUs (IRQ_READ: 8 KiB, for 4 KiB pages and more): a file cut short, or one
# missing (an older kernel, a vector freed), sends the scrape to /proc/interrupts.
IRQ_FILES = ("actions", "per_cpu_count")
IRQ_READ = 8192
_IRQS = TreeHeld(size=IRQ_READ)


@functools.lru_cache(maxsize=64)
def _cpu_tuple(text: bytes) -> tuple[int, ...]:
    return tuple(sorted(parse_cpu_list(text.decode("ascii", errors="replace"))))


def sysfs_interrupts(fs: HostFS, irqs: Iterable[str]) -> Interrupts | None:
    """The IRQs' lines as /proc/interrupts would give them (counts of the online CPUs and
    action names; no description), from /sys/kernel/irq; None where it cannot."""
    kirq = str(fs.sys("kernel", "irq"))
    if not fs.exists(kirq):
        return None  # before 4.17: not a failed open of each vector's files every scrape
    order = sorted(irqs, key=int)
    cpu = str(fs.sys("devices", "system", "cpu"))
    paths = [f"{cpu}/online", f"{cpu}/possible"]
    paths += [f"{kirq}/{irq}/{f}" for irq in order for f in IRQ_FILES]
    raw = _IRQS.read(fs, lambda: paths, prune=True)
    if any(r is None for r in raw):
        return None
    online, possible = _cpu_tuple(raw[0] or b""), _cpu_tuple(raw[1] or b"")
    lines = []
    for k, irq in enumerate(order):
        actions, count = raw[2 + 2 * k], raw[3 + 2 * k]
        counts = parse_per_cpu_count(
            (count or b"").decode("ascii", errors="replace"), possible=possible, online=online
        )
        if counts is None:
            return None
        names = (actions or b"").decode("utf-8", errors="replace").strip()
        lines.append(IrqLine(irq, counts, "", names.replace(",", ", ")))
    return Interrupts(cpus=online, lines=tuple(lines))


# The affinity lists of the host tree read last, held open (hostfs.HeldFiles): irqbalance
# rewrites them at any time, so they are read every scrape, but /proc/irq/<irq>/*_list are
# seq_file files that show again when read at offset 0 (fs/seq_file.c), and an IRQ freed
# (its /proc/irq/<irq> removed) fails a held descriptor's read, then its path is read
# afresh. One entry: one host tree at a time.
_HELD = TreeHeld()


def irq_affinities(fs: HostFS, irqs: Sequence[str]) -> list[bytes | None]:
    """Each IRQ's AFFINITY files in turn, as read now (None: missing)."""
    root = str(fs.proc("irq"))
    return _HELD.read(
        fs, lambda: [f"{root}/{irq}/{f}" for irq in irqs for f in AFFINITY], prune=True
    )
