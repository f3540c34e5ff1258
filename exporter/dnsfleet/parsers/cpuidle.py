"""cpuidle states, PM QoS limits and cpufreq governors.

Kernel sources: ``drivers/cpuidle/sysfs.c`` (state directories; ``latency``, ``residency``
and ``time`` in microseconds, ``usage`` in entries), ``kernel/power/qos.c``
(``/dev/cpu_dma_latency``: a native-endian s32 in microseconds), ``drivers/base/power/sysfs.c``
(``pm_qos_resume_latency_us``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

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


def parse_state_static(files: Mapping[str, str], *, what: str = "cpuidle state") -> tuple[str, int]:
    """The driver's part of a state directory: its name and exit latency in µs."""
    name = files.get("name", "").strip()
    if not name:
        raise ValueError(f"{what}/name: missing or empty")
    return name, _num(files, "latency", what)


def parse_cpuidle_state(files: Mapping[str, str], *, what: str = "cpuidle state") -> CpuidleState:
    """One ``cpuN/cpuidle/stateM`` directory, as file name -> content."""
    name, latency = parse_state_static(files, what=what)
    disable = _num(files, "disable", what)
    return CpuidleState(
        name=name,
        latency_us=latency,
        disabled=disable != 0,
        time_us=_num(files, "time", what),
        usage=_num(files, "usage", what),
        residency_us=_num(files, "residency", what) if "residency" in files else None,
        desc=files.get("desc", "").strip(),
    )


def parse_counters(values: Sequence[bytes | None], names: Sequence[str], *, what: str) -> list[int]:
    """Sysfs attributes of one non-negative decimal integer each (``disable``, ``time``,
    ``usage``), as read: None for a file that is missing. ``names`` name them in an error
    (``what/name: ...``), as :func:`parse_cpuidle_state` does.

    A 128-CPU host has 1,536 of these per scrape: they are converted in one pass, and only
    a batch that int() refuses or that carries a sign or an underscore (which int() takes
    and sysfs never writes) is looked at file by file for the one to blame."""
    if None not in values:
        present = cast("Sequence[bytes]", values)
        try:
            out = [int(v) for v in present]
        except ValueError:
            pass
        else:
            joined = b"".join(present)
            if b"-" not in joined and b"+" not in joined and b"_" not in joined:
                return out
    out = []
    for v, name in zip(values, names, strict=True):
        text = (v or b"").strip()
        if not text.isdigit():
            got = text[:40].decode("utf-8", errors="replace")
            raise ValueError(f"{what}/{name}: expected a non-negative integer, got {got!r}")
        out.append(int(text))
    return out


Counters = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # disable, time, usage
_W = len(PER_CPU_STATE_FILES)


def parse_state_counters(
    raw: Sequence[bytes | None], files: Sequence[str], *, what: str
) -> Counters | None:
    """One CPU's ``disable``, ``time`` and ``usage`` of each state in turn, as read (None:
    missing), named by ``files``; each a tuple in the states' order. A state whose three
    files are all missing ends the CPU's states: a CPU without a registered cpuidle device
    has none (None). One missing beside the others present is an error."""
    if None in raw:
        n = next((k for k in range(0, len(raw), _W) if raw[k : k + _W].count(None) == _W), len(raw))
        if n == 0:
            return None
        raw, files = raw[:n], files[:n]
    c = parse_counters(raw, files, what=what)
    return tuple(c[0::_W]), tuple(c[1::_W]), tuple(c[2::_W])


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


def allowed(*, latency_us: int, disabled: bool, limit_us: int) -> bool:
    """Whether a governor may enter a state under a latency limit (menu/teo/ladder skip a
    state whose exit latency exceeds the limit: ``cpuidle_governor_latency_req``)."""
    return not disabled and latency_us <= limit_us
