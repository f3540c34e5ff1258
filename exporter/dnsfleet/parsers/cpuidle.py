"""cpuidle states, PM QoS limits and cpufreq governors.

Kernel sources: ``drivers/cpuidle/sysfs.c`` (state directories; ``latency``, ``residency``
and ``time`` in microseconds, ``usage`` in entries), ``kernel/power/qos.c``
(``/dev/cpu_dma_latency``: a native-endian s32 in microseconds), ``drivers/base/power/sysfs.c``
(``pm_qos_resume_latency_us``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

# PM_QOS_CPU_LATENCY_DEFAULT_VALUE: 2000 s, i.e. nobody asked for a limit.
PM_QOS_NO_LIMIT_US = 2_000_000_000
STATIC_STATE_FILES = ("name", "latency")  # the driver's, same on every CPU
PER_CPU_STATE_FILES = ("disable", "time", "usage")
STATE_FILES = STATIC_STATE_FILES + PER_CPU_STATE_FILES


@dataclass(frozen=True, slots=True)
class CpuidleState:
    name: str
    latency_us: int  # exit latency
    disabled: bool
    time_us: int  # total residency
    usage: int  # entries
    residency_us: int | None = None  # target residency
    desc: str = ""


def _num(files: Mapping[str, str], key: str, what: str) -> int:
    v = files[key].strip() if key in files else ""
    if not v.isdigit():
        raise ValueError(f"{what}/{key}: expected a non-negative integer, got {v[:40]!r}")
    return int(v)


def parse_cpuidle_state(files: Mapping[str, str], *, what: str = "cpuidle state") -> CpuidleState:
    """One ``cpuN/cpuidle/stateM`` directory, as file name -> content."""
    name = files.get("name", "").strip()
    if not name:
        raise ValueError(f"{what}/name: missing or empty")
    disable = _num(files, "disable", what)
    return CpuidleState(
        name=name,
        latency_us=_num(files, "latency", what),
        disabled=disable != 0,
        time_us=_num(files, "time", what),
        usage=_num(files, "usage", what),
        residency_us=_num(files, "residency", what) if "residency" in files else None,
        desc=files.get("desc", "").strip(),
    )


def parse_cpu_dma_latency(data: bytes) -> int:
    """The aggregated PM QoS CPU latency limit in microseconds."""
    if len(data) != 4:
        raise ValueError(f"cpu_dma_latency: read {len(data)} bytes, expected 4")
    value: int = struct.unpack("=i", data)[0]
    if value < 0:
        raise ValueError(f"cpu_dma_latency: negative limit {value}")
    return value


def parse_resume_latency(text: str) -> int | None:
    """``cpuN/power/pm_qos_resume_latency_us``: "0" means no constraint (None), "n/a" means
    a 0 µs constraint (the CPU may not idle beyond polling), N is N µs."""
    v = text.strip()
    if v == "n/a":
        return 0
    if not v.isdigit():
        raise ValueError(f"pm_qos_resume_latency_us: unexpected {v[:40]!r}")
    return None if int(v) == 0 else int(v)


def allowed(state: CpuidleState, limit_us: int) -> bool:
    """Whether a governor may enter the state under a latency limit (menu/teo/ladder skip a
    state whose exit latency exceeds the limit: ``cpuidle_governor_latency_req``)."""
    return not state.disabled and state.latency_us <= limit_us
