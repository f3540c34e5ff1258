"""CPU wake-up latency: PM QoS, cpuidle states, frequency governor, tuned, intel_idle.

A CPU sleeping in a deep C-state takes tens to hundreds of microseconds to wake for the
packet that interrupts it; on a resolver that is added to every cache hit. The kernel enters
an idle state only if it is enabled and its exit latency is within the PM QoS limit
(``/dev/cpu_dma_latency``, lowered by tuned's ``force_latency``, and the per-CPU
``pm_qos_resume_latency_us``): ``dnsfleet_cpu_wakeup_latency_seconds`` is the worst exit
latency any CPU may incur under those rules.

cpuidle series are aggregated by state name (O(states), not CPUs x states). Emits every
``dnsfleet_cpu_*``, ``dnsfleet_cpuidle_*``, ``dnsfleet_pm_qos_*``, ``dnsfleet_intel_idle_*``
and ``dnsfleet_tuned_*`` family (collector label ``cpu_latency``).

/dev/cpu_dma_latency is readable by root only. Without it the limit is unknown:
``dnsfleet_pm_qos_readable`` is 0, ``dnsfleet_pm_qos_cpu_latency_seconds`` and
``dnsfleet_cpu_wakeup_latency_seconds`` are absent (a wake-up latency computed without the
limit would overstate it on exactly the hosts tuned fixed), and the rest is reported; the
collector still succeeds.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from dnsfleet.collectors.base import CollectorError, host_collector
from dnsfleet.config import Config
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.cpuidle import (
    PER_CPU_STATE_FILES,
    STATE_FILES,
    STATIC_STATE_FILES,
    CpuidleState,
    allowed,
    parse_cpu_dma_latency,
    parse_cpuidle_state,
    parse_resume_latency,
)
from dnsfleet.parsers.interrupts import parse_cpu_list

log = logging.getLogger(__name__)
_CPU_DIR = re.compile(r"^cpu(\d+)$")
US = 1_000_000  # µs per second


@dataclass(frozen=True)
class CpuIdle:
    cpu: int
    states: tuple[CpuidleState, ...]
    resume_limit_us: int | None  # per-CPU PM QoS; None = no constraint


def online_cpus(fs: HostFS) -> list[int]:
    base = fs.sys("devices", "system", "cpu")
    present = sorted(int(m.group(1)) for n in fs.listdir(base) if (m := _CPU_DIR.match(n)))
    online = fs.read_optional(base / "online")
    if online is None:
        return present
    on = parse_cpu_list(online)
    return [c for c in present if c in on]


def _state_order(name: str) -> int:
    return int(name[5:]) if name[5:].isdigit() else 1 << 30


@dataclass(frozen=True, slots=True)
class Topology:
    """What stays put between scrapes: the online CPUs and, with a single cpuidle driver,
    its states' directory names and static files (``name``, ``latency``). ``shared`` is
    None where CPUs may differ (CONFIG_CPU_IDLE_MULTIPLE_DRIVERS): then every CPU's states
    are listed and read whole each scrape."""

    key: tuple[object, ...]
    cpus: tuple[int, ...]
    driver: str | None  # cpuidle/current_driver
    shared: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] | None


# The layout read last. One entry: a collector reads one host tree; the host lane runs one
# collector at a time, and a reader that finds no entry reads the layout again.
_TOPOLOGY: dict[HostFS, Topology] = {}


def topology(fs: HostFS) -> Topology:
    """The CPUs' layout, read again only when a cheap file that changes with it does: CPU
    hotplug rewrites ``online`` and ``present`` (a CPU directory appears or goes with
    ``present``), and loading or switching the cpuidle driver (its states and their exit
    latencies) changes ``current_driver``. On a 128-CPU host the directory listings and the
    driver's state files were read on every scrape."""
    base = fs.sys("devices", "system", "cpu")
    driver = fs.read_optional(base / "cpuidle" / "current_driver")
    key = (
        fs,
        fs.read_optional(base / "online"),
        fs.read_optional(base / "present"),
        fs.read_optional(base / "possible"),
        driver,
    )
    cached = _TOPOLOGY.get(fs)
    if cached is not None and cached.key == key:
        return cached
    cpus = online_cpus(fs)
    shared: list[tuple[str, tuple[tuple[str, str], ...]]] | None = None
    for cpu in cpus:
        d = f"{base}/cpu{cpu}/cpuidle"
        names = sorted((n for n in fs.listdir(d) if n.startswith("state")), key=_state_order)
        if not names:
            continue
        if fs.exists(f"{d}/driver"):
            break  # one driver per CPU: nothing shared to keep
        shared = []
        for n in names:
            static = tuple(
                (f, text)
                for f in STATIC_STATE_FILES
                if (text := fs.read_optional(f"{d}/{n}/{f}")) is not None
            )
            shared.append((n, static))
        break
    topo = Topology(
        key=key,
        cpus=tuple(cpus),
        driver=driver,
        shared=None if shared is None else tuple(shared),
    )
    _TOPOLOGY.clear()
    _TOPOLOGY[fs] = topo
    return topo


def read_cpuidle(fs: HostFS, topo: Topology) -> list[CpuIdle]:
    """The idle states of every CPU that has them.

    With a single cpuidle driver (no ``cpuN/cpuidle/driver`` directory, which only exists
    with CONFIG_CPU_IDLE_MULTIPLE_DRIVERS), every CPU has that driver's states, and their
    names and exit latencies come from ``drv->states[]`` (``drivers/cpuidle/sysfs.c``): they
    are kept in ``topo``. Per-CPU files (disable, time, usage) are read for every CPU each
    scrape: they are counters and settings, not layout."""
    base = str(fs.sys("devices", "system", "cpu"))
    out: list[CpuIdle] = []
    for cpu in topo.cpus:
        d = f"{base}/cpu{cpu}/cpuidle"
        states: list[CpuidleState] = []
        if topo.shared is None:
            names = sorted((n for n in fs.listdir(d) if n.startswith("state")), key=_state_order)
            for n in names:
                files = {
                    f: text
                    for f in STATE_FILES
                    if (text := fs.read_optional(f"{d}/{n}/{f}")) is not None
                }
                states.append(parse_cpuidle_state(files, what=f"{d}/{n}"))
        else:
            for n, static in topo.shared:
                files = {
                    f: text
                    for f in PER_CPU_STATE_FILES
                    if (text := fs.read_optional(f"{d}/{n}/{f}")) is not None
                }
                if not files:
                    break  # this CPU has no cpuidle device (e.g. not registered)
                states.append(parse_cpuidle_state({**dict(static), **files}, what=f"{d}/{n}"))
        if not states:
            continue
        resume = fs.read_optional(f"{base}/cpu{cpu}/power/pm_qos_resume_latency_us")
        out.append(
            CpuIdle(
                cpu=cpu,
                states=tuple(states),
                resume_limit_us=parse_resume_latency(resume) if resume else None,
            )
        )
    return out


def read_pm_qos(fs: HostFS) -> int | None:
    """The PM QoS CPU latency limit in µs; None when /dev/cpu_dma_latency is missing or not
    readable (not root)."""
    path = fs.dev("cpu_dma_latency")
    try:
        data = fs.read_bytes(path, limit=64)
    except FileNotFoundError:
        return None
    except HostReadError as e:
        log.debug("PM QoS limit unknown: %s", e)
        return None
    return parse_cpu_dma_latency(data)


def wakeup_latency_us(cpus: list[CpuIdle], pm_qos_us: int) -> int:
    worst = 0
    for c in cpus:
        limit = pm_qos_us if c.resume_limit_us is None else min(pm_qos_us, c.resume_limit_us)
        for s in c.states:
            if allowed(s, limit):
                worst = max(worst, s.latency_us)
    return worst


def collect(fs: HostFS, config: Config) -> list[Family]:
    del config
    try:
        return _collect(fs)
    except (HostReadError, ValueError) as e:
        raise CollectorError(str(e)) from e


def _collect(fs: HostFS) -> list[Family]:
    topo = topology(fs)
    idle = read_cpuidle(fs, topo)
    pm_qos = _pm_qos_families(fs, idle)
    driver = topo.driver
    return [
        *pm_qos,
        *_idle_state_families(idle),
        *_driver_families(fs, driver),
        *_governor_families(fs, topo.cpus),
        *_tuned_families(fs),
        *_intel_idle_families(fs, driver),
    ]


def _pm_qos_families(fs: HostFS, idle: list[CpuIdle]) -> list[Family]:
    fams: list[Family] = []
    pm_qos = read_pm_qos(fs)
    if fs.exists(fs.dev("cpu_dma_latency")) or pm_qos is not None:
        fams.append(
            Family(
                "dnsfleet_pm_qos_readable",
                "1 if the PM QoS CPU latency limit could be read from "
                "/dev/cpu_dma_latency (root only).",
            ).add(1 if pm_qos is not None else 0)
        )
    if pm_qos is not None:
        fams.append(
            Family(
                "dnsfleet_pm_qos_cpu_latency_seconds",
                "PM QoS CPU latency limit (/dev/cpu_dma_latency); 2000 means no "
                "limit was requested.",
            ).add(pm_qos / US)
        )
        if idle:
            fams.append(
                Family(
                    "dnsfleet_cpu_wakeup_latency_seconds",
                    "Worst exit latency a CPU may incur now: the deepest enabled "
                    "idle state the PM QoS limits allow, over all CPUs.",
                ).add(wakeup_latency_us(idle, pm_qos) / US)
            )
    return fams


def _idle_state_families(idle: list[CpuIdle]) -> list[Family]:
    fams: list[Family] = []
    if not idle:
        return fams
    exit_lat = Family(
        "dnsfleet_cpuidle_state_exit_latency_seconds",
        "Exit latency of the idle state (the largest over CPUs).",
    )
    enabled = Family(
        "dnsfleet_cpuidle_state_enabled_cpus", "CPUs on which the idle state is enabled."
    )
    residency = Family(
        "dnsfleet_cpuidle_state_residency_seconds_total",
        "Time CPUs spent in the idle state, summed over CPUs.",
        "counter",
    )
    entries = Family(
        "dnsfleet_cpuidle_state_entries_total",
        "Times CPUs entered the idle state, summed over CPUs.",
        "counter",
    )
    agg: dict[str, list[int]] = {}  # name -> [latency, enabled, time, usage]
    for c in idle:
        for s in c.states:
            a = agg.setdefault(s.name, [0, 0, 0, 0])
            a[0] = max(a[0], s.latency_us)
            a[1] += 0 if s.disabled else 1
            a[2] += s.time_us
            a[3] += s.usage
    for name, (lat, en, t, usage) in agg.items():
        sl = {"state": name}
        exit_lat.add(lat / US, sl)
        enabled.add(en, sl)
        residency.add(t / US, sl)
        entries.add(usage, sl)
    fams += [exit_lat, enabled, residency, entries]
    return fams


def _driver_families(fs: HostFS, driver: str | None) -> list[Family]:
    fams: list[Family] = []
    cpuidle_dir = fs.sys("devices", "system", "cpu", "cpuidle")
    if driver is not None:
        governor = (
            fs.read_optional(cpuidle_dir / "current_governor")
            or fs.read_optional(cpuidle_dir / "current_governor_ro")
            or ""
        )
        fams.append(
            Family(
                "dnsfleet_cpuidle_driver_info",
                "cpuidle driver and governor ('none': the architecture's default "
                "idle, no cpuidle states); always 1.",
            ).add(1, {"driver": driver.strip(), "governor": governor.strip()})
        )
    return fams


def _governor_families(fs: HostFS, cpus: tuple[int, ...]) -> list[Family]:
    fams: list[Family] = []
    governors: dict[str, int] = {}
    base = str(fs.sys("devices", "system", "cpu"))
    for cpu in cpus:
        g = fs.read_optional(f"{base}/cpu{cpu}/cpufreq/scaling_governor")
        if g is not None and g.strip():
            governors[g.strip()] = governors.get(g.strip(), 0) + 1
    if governors:
        fam = Family("dnsfleet_cpu_scaling_governor_cpus", "CPUs using the cpufreq governor.")
        for g, n in sorted(governors.items()):
            fam.add(n, {"governor": g})
        fams.append(fam)
    return fams


def _tuned_families(fs: HostFS) -> list[Family]:
    fams: list[Family] = []
    profile = fs.read_optional(fs.root("etc", "tuned", "active_profile"))
    if profile is not None and profile.strip():
        fams.append(
            Family("dnsfleet_tuned_profile_info", "The active tuned profile; always 1.").add(
                1, {"profile": profile.strip()}
            )
        )
    return fams


def _intel_idle_families(fs: HostFS, driver: str | None) -> list[Family]:
    fams: list[Family] = []
    # The module parameter exists whenever intel_idle is built in, also where another
    # driver (acpi_idle, haltpoll) does the work and the parameter means nothing.
    max_cstate = (
        fs.read_optional(fs.sys("module", "intel_idle", "parameters", "max_cstate"))
        if driver is not None and driver.strip() == "intel_idle"
        else None
    )
    if max_cstate is not None:
        v = max_cstate.strip()
        if not v.isdigit():
            raise ValueError(f"intel_idle max_cstate: unexpected {v[:40]!r}")
        fams.append(
            Family(
                "dnsfleet_intel_idle_max_cstate",
                "intel_idle.max_cstate: the deepest C-state intel_idle may use "
                "(0: intel_idle disabled).",
            ).add(int(v))
        )
    return fams


COLLECTOR = host_collector("cpu_latency", collect)
