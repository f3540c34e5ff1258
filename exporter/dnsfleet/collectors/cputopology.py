"""The cpu_latency collector's layout of the CPUs, and the per-CPU files it reads each scrape.

Which cpuidle files change and which do not (Documentation/admin-guide/pm/cpuidle.rst,
"Representation of Idle States"; Documentation/ABI/testing/sysfs-devices-system-cpu):

- ``name``, ``desc``, ``latency``, ``residency`` of ``cpuN/cpuidle/stateM`` describe the
  driver's idle state (``drv->states[M]``, one table for every CPU with a single driver):
  set when the driver registers. acpi_idle alone rewrites its table at run time (a _CST
  change notification: ``acpi_processor_power_state_has_changed``) without a change of
  driver, so the first CPU's ``name`` and ``latency`` are read every scrape (a few files)
  and the layout is read again when they differ.
- ``disable`` (writable, per CPU), ``usage``, ``time``, ``above``, ``below`` change at run
  time; ``power/pm_qos_resume_latency_us`` (Documentation/ABI/testing/sysfs-devices-power)
  and ``cpufreq/scaling_governor`` are settings that root may write at any time. These are
  read every scrape (``above`` and ``below`` are not reported). None has a whole-system
  source: the kernel keeps them per CPU (``/proc/stat``'s idle time is not per state, and
  cpuidle's ``default_status`` is the driver's default, not the CPU's ``disable``).
- The CPU set changes with hotplug (``online``, ``present``, ``possible``) and the states
  with the driver (``cpuidle/current_driver``): the layout is read again when one differs.

The per-scrape files are held open (hostfs.HeldFiles) while the layout stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dnsfleet.collectors.treeheld import TreeHeld
from dnsfleet.hostfs import HeldFiles, HostFS
from dnsfleet.parsers.cpuidle import PER_CPU_STATE_FILES, STATIC_STATE_FILES, parse_state_static
from dnsfleet.parsers.interrupts import parse_cpu_list

_CPU_DIR = re.compile(r"^cpu(\d+)$")
# Per-CPU settings read with the idle states, relative to cpuN; read_cpus takes them last.
SETTINGS = ("power/pm_qos_resume_latency_us", "cpufreq/scaling_governor")


def online_cpus(fs: HostFS) -> list[int]:
    base = fs.sys("devices", "system", "cpu")
    present = sorted(int(m.group(1)) for n in fs.listdir(base) if (m := _CPU_DIR.match(n)))
    online = fs.read_optional(base / "online")
    if online is None:
        return present
    on = parse_cpu_list(online)
    return [c for c in present if c in on]


def state_order(name: str) -> int:
    return int(name[5:]) if name[5:].isdigit() else 1 << 30


@dataclass(frozen=True, slots=True)
class Topology:
    """What stays put between scrapes: the online CPUs, the single cpuidle driver's states
    (directories, names, exit latencies) and the files each CPU reads every scrape
    (``per_cpu``, under ``cpuN``: the states' counters, then SETTINGS). ``shared`` is None
    where CPUs may differ (CONFIG_CPU_IDLE_MULTIPLE_DRIVERS): each CPU is read whole.

    ``paths``: what a scrape reads, in order: ``static`` (the first CPU's state names and
    exit latencies, as read when the layout was: they must read the same), then each CPU's
    ``per_cpu`` files in ``cpus`` order."""

    key: tuple[object, ...]
    cpus: tuple[int, ...]
    driver: str | None  # cpuidle/current_driver
    shared: tuple[str, ...] | None
    names: tuple[str, ...] = ()
    latency_us: tuple[int, ...] = ()
    per_cpu: tuple[str, ...] = SETTINGS
    static: tuple[bytes | None, ...] = ()
    paths: tuple[str, ...] = ()
    held: HeldFiles = field(default_factory=HeldFiles, compare=False)


# The layout read last. One entry: a collector reads one host tree; the host lane runs one
# collector at a time, and a reader that finds no entry reads the layout again.
_TOPOLOGY: dict[HostFS, Topology] = {}


# Under /sys/devices/system/cpu, read every scrape: what the layout is kept on (the
# driver, then the CPU sets), then the cpuidle governor, which cpu.py reports (writable at
# run time: current_governor, current_governor_ro without cpuidle_sysfs_switch). All are
# attributes of the cpu subsystem and cpuidle, held open and read again at offset 0
# (hostfs.HeldFiles) like the per-CPU files: an open, a read and a close of each every
# scrape were a third of the collector on a host without cpuidle states.
SYSTEM_FILES = (
    "cpuidle/current_driver",
    "online",
    "present",
    "possible",
    "cpuidle/current_governor",
    "cpuidle/current_governor_ro",
)
_SYSTEM = TreeHeld()


def system_files(fs: HostFS) -> list[str | None]:
    """The SYSTEM_FILES as read now, in order (None: missing)."""
    base = fs.sys("devices", "system", "cpu")
    raw = _SYSTEM.read(fs, lambda: [f"{base}/{f}" for f in SYSTEM_FILES])
    return [None if b is None else b.decode("utf-8", errors="replace") for b in raw]


def topology(fs: HostFS, system: list[str | None] | None = None) -> Topology:
    """The CPUs' layout, read again only when a cheap file that changes with it does: CPU
    hotplug rewrites ``online`` and ``present`` (a CPU directory appears or goes with
    ``present``), and loading or switching the cpuidle driver (its states and their exit
    latencies) changes ``current_driver``. On a 128-CPU host the directory listings and the
    driver's state files were read on every scrape. ``system``: :func:`system_files` as
    read this scrape (read now when not given)."""
    driver, online, present, possible = (system_files(fs) if system is None else system)[:4]
    key = (fs, online, present, possible, driver)
    cached = _TOPOLOGY.get(fs)
    if cached is not None and cached.key == key:
        return cached
    topo = _read_topology(fs, key, driver)
    forget()
    _TOPOLOGY[fs] = topo
    return topo


def forget() -> None:
    """Drop the layout kept (and close its held files): the next scrape reads it again."""
    for topo in _TOPOLOGY.values():
        topo.held.close()
    _TOPOLOGY.clear()


def _read_topology(fs: HostFS, key: tuple[object, ...], driver: str | None) -> Topology:
    base = f"{fs.sys('devices', 'system', 'cpu')}"
    cpus = tuple(online_cpus(fs))
    for cpu in cpus:
        d = f"{base}/cpu{cpu}/cpuidle"
        dirs = sorted((n for n in fs.listdir(d) if n.startswith("state")), key=state_order)
        if not dirs:
            continue
        if fs.exists(f"{d}/driver"):
            break  # one driver per CPU: nothing shared to keep
        files = [f"{n}/{f}" for n in dirs for f in STATIC_STATE_FILES]
        raw = fs.read_many(d, files)
        w = len(STATIC_STATE_FILES)
        static = [
            parse_state_static(
                {
                    f: v.decode("utf-8", errors="replace")
                    for f, v in zip(STATIC_STATE_FILES, raw[w * k : w * k + w], strict=True)
                    if v is not None
                },
                what=f"{d}/{n}",
            )
            for k, n in enumerate(dirs)
        ]
        per_cpu = (*(f"cpuidle/{n}/{f}" for n in dirs for f in PER_CPU_STATE_FILES), *SETTINGS)
        return Topology(
            key=key,
            cpus=cpus,
            driver=driver,
            shared=tuple(dirs),
            names=tuple(name for name, _ in static),
            latency_us=tuple(latency for _, latency in static),
            per_cpu=per_cpu,
            static=tuple(raw),
            paths=(
                *(f"{d}/{f}" for f in files),
                *(f"{base}/cpu{c}/{f}" for c in cpus for f in per_cpu),
            ),
        )
    paths = tuple(f"{base}/cpu{c}/{f}" for c in cpus for f in SETTINGS)
    return Topology(key=key, cpus=cpus, driver=driver, shared=None, paths=paths)


def per_cpu_files(
    fs: HostFS, system: list[str | None] | None = None
) -> tuple[Topology, list[bytes | None]]:
    """The layout, and each CPU's ``per_cpu`` files in turn as read this scrape (None:
    missing). When the first CPU's state names or exit latencies no longer read as they
    did, the layout is read again, and the files with it. ``system``: as :func:`topology`."""
    topo = topology(fs, system)
    raw = fs.read_held(topo.held, topo.paths)
    n = len(topo.static)
    if tuple(raw[:n]) != topo.static:
        forget()
        topo = topology(fs)
        raw = fs.read_held(topo.held, topo.paths)
        n = len(topo.static)
    return topo, raw[n:]
