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
from dataclasses import dataclass
from typing import cast

from dnsfleet.collectors.base import CollectorError, host_collector
from dnsfleet.collectors.cputopology import (
    SETTINGS,
    Topology,
    per_cpu_files,
    state_order,
    system_files,
)
from dnsfleet.config import Config
from dnsfleet.exposition import Family, Labels
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.cpuidle import (
    STATE_FILES,
    allowed,
    parse_cpu_dma_latency,
    parse_cpuidle_state,
    parse_resume_latency,
    parse_state_counters,
)

log = logging.getLogger(__name__)
US = 1_000_000  # µs per second


@dataclass(frozen=True, slots=True)
class CpuIdle:
    """One CPU's idle states in the driver's order: their names and exit latencies (with
    one driver, the same tuples for every CPU), and what this CPU's files said this scrape."""

    cpu: int
    names: tuple[str, ...]
    latency_us: tuple[int, ...]
    disable: tuple[int, ...]  # the ``disable`` files: non-zero = disabled on this CPU
    time_us: tuple[int, ...]  # total residency
    usage: tuple[int, ...]  # entries
    resume_limit_us: int | None  # per-CPU PM QoS; None = no constraint


def read_cpus(
    fs: HostFS, topo: Topology, raw: list[bytes | None]
) -> tuple[list[CpuIdle], dict[str, int]]:
    """The idle states of every CPU that has them, and how many CPUs use each cpufreq
    governor.

    With a single cpuidle driver (no ``cpuN/cpuidle/driver`` directory, which only exists
    with CONFIG_CPU_IDLE_MULTIPLE_DRIVERS), every CPU has that driver's states, and their
    names and exit latencies come from ``drv->states[]`` (``drivers/cpuidle/sysfs.c``): they
    are kept in ``topo``. Per-CPU files (disable, time, usage, the resume latency and the
    governor: ``raw``, each CPU's ``topo.per_cpu`` in turn) are read for every CPU each
    scrape: counters and settings, not layout (a state an administrator disables shows on
    the next scrape)."""
    base = str(fs.sys("devices", "system", "cpu"))
    out: list[CpuIdle] = []
    governors: dict[str, int] = {}
    w = len(topo.per_cpu)
    for k, cpu in enumerate(topo.cpus):
        d = f"{base}/cpu{cpu}"
        mine = raw[w * k : w * k + w]
        resume, governor = mine[-2], mine[-1]
        if governor is not None and (g := governor.decode("utf-8", errors="replace").strip()):
            governors[g] = governors.get(g, 0) + 1
        states = _cpu_states(fs, d) if topo.shared is None else _shared_states(topo, mine, d)
        if states is None:
            continue
        limit = resume.decode("utf-8", errors="replace") if resume else ""
        out.append(
            CpuIdle(cpu, *states, resume_limit_us=parse_resume_latency(limit) if limit else None)
        )
    return out, governors


# One CPU's states: names, exit latencies (µs), disable, time (µs), usage.
_States = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _shared_states(topo: Topology, raw: list[bytes | None], d: str) -> _States | None:
    """One CPU's counters of the single driver's states; None: no cpuidle device."""
    k = -len(SETTINGS)
    c = parse_state_counters(raw[:k], topo.per_cpu[:k], what=d)
    return None if c is None else (topo.names[: len(c[0])], topo.latency_us[: len(c[0])], *c)


def _cpu_states(fs: HostFS, d: str) -> _States | None:
    """One CPU's states read whole, its driver's own (one driver per CPU)."""
    idle = f"{d}/cpuidle"
    dirs = sorted((n for n in fs.listdir(idle) if n.startswith("state")), key=state_order)
    if not dirs:
        return None
    raw = fs.read_many(idle, [f"{n}/{f}" for n in dirs for f in STATE_FILES])
    w = len(STATE_FILES)
    states = [
        parse_cpuidle_state(
            {
                f: v.decode("utf-8", errors="replace")
                for f, v in zip(STATE_FILES, raw[w * k : w * k + w], strict=True)
                if v is not None
            },
            what=f"{idle}/{n}",
        )
        for k, n in enumerate(dirs)
    ]
    rows = [(s.name, s.latency_us, int(s.disabled), s.time_us, s.usage) for s in states]
    return cast("_States", tuple(zip(*rows, strict=True)))


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
        for latency, disable in zip(c.latency_us, c.disable, strict=True):
            if allowed(latency_us=latency, disabled=disable != 0, limit_us=limit):
                worst = max(worst, latency)
    return worst


def collect(fs: HostFS, config: Config) -> list[Family]:
    del config
    try:
        return _collect(fs)
    except (HostReadError, ValueError) as e:
        raise CollectorError(str(e)) from e


def _collect(fs: HostFS) -> list[Family]:
    system = system_files(fs)
    topo, raw = per_cpu_files(fs, system)
    idle, governors = read_cpus(fs, topo, raw)
    pm_qos = _pm_qos_families(fs, idle)
    driver = topo.driver
    return [
        *pm_qos,
        *_idle_state_families(idle),
        *_driver_families(driver, system[4] or system[5] or ""),
        *_governor_families(governors),
        *_tuned_families(fs),
        *_intel_idle_families(fs, driver),
    ]


def _pm_qos_families(fs: HostFS, idle: list[CpuIdle]) -> list[Family]:
    fams: list[Family] = []
    pm_qos = read_pm_qos(fs)
    if pm_qos is not None or fs.exists(fs.dev("cpu_dma_latency")):
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
        for name, lat, disable, t, usage in zip(
            c.names, c.latency_us, c.disable, c.time_us, c.usage, strict=True
        ):
            a = agg.setdefault(name, [0, 0, 0, 0])
            a[0] = max(a[0], lat)
            a[1] += 0 if disable else 1
            a[2] += t
            a[3] += usage
    for name, (lat, en, t, usage) in agg.items():
        sl = Labels((("state", name),))  # one label set for the state's four series
        exit_lat.add_raw(sl, lat / US)
        enabled.add_raw(sl, en)
        residency.add_raw(sl, t / US)
        entries.add_raw(sl, usage)
    fams += [exit_lat, enabled, residency, entries]
    return fams


def _driver_families(driver: str | None, governor: str) -> list[Family]:
    fams: list[Family] = []
    if driver is not None:
        fams.append(
            Family(
                "dnsfleet_cpuidle_driver_info",
                "cpuidle driver and governor ('none': the architecture's default "
                "idle, no cpuidle states); always 1.",
            ).add(1, {"driver": driver.strip(), "governor": governor.strip()})
        )
    return fams


def _governor_families(governors: dict[str, int]) -> list[Family]:
    fams: list[Family] = []
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
