"""Resolver capacity, as recorded: the state file ``dnsfleet capacity-test``
(capacity/command.py) writes and the exporter reads (collectors/resolver_capacity.py), one
cache-hit and one cache-miss figure per resolver, and the capacity of a workload that mixes
the two (``effective_capacity``).

This module is imported by the exporter, so it stays light: the runner and its dnspython
query modules live in capacity/command.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

STATE_VERSION = 2
MAX_STATE_BYTES = 4 << 20
KINDS = ("hit", "miss")
# Why a run stopped climbing: the loss limit (a real capacity), the end of the ramp, or the
# sending client falling behind its schedule (both: the figure is a lower bound).
LIMITS = ("loss", "ramp", "client", "unknown")


# Why a measurement is no capacity (capacity/runs.py): the sending client set the limit, the
# repeats disagree, or the miss figure is above the hit one.
CONTRADICTIONS = ("client_bound", "spread", "miss_above_hit")


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One resperf run as recorded in the state file."""

    capacity_qps: float  # best served rate before the sustained loss limit
    limit: str  # "loss", "ramp" or "client" (the client set it: not a capacity)
    lost_percent: float  # lost or failed, in the bucket of that rate
    loss_spikes: int  # single buckets over the loss limit that were not sustained
    fell_behind: bool
    client_cpu_seconds: float  # resperf's user + system time
    wall_seconds: float  # the whole run, the -t wait for late answers included
    send_seconds: float = 0.0  # until the last bucket that sent (0: the whole run)
    queries_sent: int = 0
    queries_completed: int = 0
    resperf_max_qps: float = 0.0

    @property
    def client_cpu_share(self) -> float:
        return cpu_share(self.client_cpu_seconds, self.send_seconds or self.wall_seconds)


def cpu_share(cpu: float, seconds: float) -> float:
    return cpu / seconds if seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class QueryFile:
    """The query file a run sent, kept beside the state file so the run can be repeated
    and audited."""

    path: str
    count: int
    sha256: str
    zone: str = ""  # miss runs: the zone the unique names were made under


@dataclass(frozen=True, slots=True)
class Measurement:
    kind: str  # "hit" or "miss"
    capacity_qps: float
    lower_bound: bool  # the loss limit was never reached: the resolver can do more
    limit: str  # one of LIMITS
    measured_at: float  # epoch seconds
    lost_percent: float  # lost or failed, in the bucket of the maximum throughput
    max_loss_percent: float
    max_qps_offered: int
    ramp_seconds: int
    queries_sent: int = 0
    queries_completed: int = 0
    resperf_max_qps: float = 0.0  # resperf's own "Maximum throughput" (SERVFAILs counted)
    resperf: tuple[str, ...] = ()
    queries: QueryFile | None = None
    # The repeats (capacity/runs.py): every run, the spread of the figures the resolver
    # limited, and what contradicts the figure; with a contradiction it is no capacity.
    runs: tuple[RunRecord, ...] = ()
    spread: float | None = None
    contradictions: tuple[str, ...] = ()


def effective_capacity(hit_ratio: float, c_hit: float, c_miss: float) -> float:
    """Queries per second a resolver can answer when ``hit_ratio`` of them hit the cache:
    a query costs 1/C_hit or 1/C_miss seconds of the resolver, so the mix costs the weighted
    mean of the two and the capacity is its inverse (a weighted harmonic mean). Mirrors
    ``target:dnsfleet_resolver_capacity_effective:qps`` in alerts/rules/capacity.rules.yml."""
    if not 0 <= hit_ratio <= 1 or c_hit <= 0 or c_miss <= 0:
        raise ValueError("hit_ratio within 0..1 and positive capacities, please")
    return 1 / (hit_ratio / c_hit + (1 - hit_ratio) / c_miss)


def choose_capacity(
    by_kind: Mapping[str, float], hit_ratio: float | None
) -> tuple[float, str] | None:
    """The figure a resolver's headroom is judged against, and its basis, chosen as the
    recording rule ``target:dnsfleet_resolver_capacity_effective:qps`` does: the declared
    figure, else the hit/miss mix at the live cache-hit ratio, else the miss figure, else the
    (optimistic) hit figure. ``by_kind`` holds the positive figures by kind; None: none."""
    if "declared" in by_kind:
        return by_kind["declared"], "declared"
    if "hit" in by_kind and "miss" in by_kind and hit_ratio is not None:
        mix = effective_capacity(hit_ratio, by_kind["hit"], by_kind["miss"])
        return mix, f"mix at {hit_ratio:.0%} cache hits"
    if "miss" in by_kind:
        return by_kind["miss"], "miss figure: no live cache-hit ratio"
    if "hit" in by_kind:
        return by_kind["hit"], "hit figure only: optimistic, assumes every query cached"
    return None


# ------------------------------------------------------------------ state file


def _measurement(kind: str, m: Any) -> Measurement:
    if not isinstance(m, dict):
        raise TypeError("expected an object")
    q = m.get("queries")
    queries = (
        None
        if q is None
        else QueryFile(
            path=str(q["path"]),
            count=int(q["count"]),
            sha256=str(q["sha256"]),
            zone=str(q.get("zone", "")),
        )
    )
    limit = str(m["limit"])
    if limit not in LIMITS:
        raise ValueError(f"limit {limit!r} is not one of {', '.join(LIMITS)}")
    capacity = float(m["capacity_qps"])
    if not math.isfinite(capacity) or capacity < 0:
        raise ValueError(f"capacity_qps {capacity!r} is not a finite non-negative number")
    contradictions = tuple(str(c) for c in m.get("contradictions", ()))
    for c in contradictions:
        if c not in CONTRADICTIONS:
            raise ValueError(f"contradiction {c!r} is not one of {', '.join(CONTRADICTIONS)}")
    spread = m.get("spread")
    return Measurement(
        kind=kind,
        capacity_qps=capacity,
        lower_bound=bool(m["lower_bound"]),
        limit=limit,
        measured_at=float(m["measured_at"]),
        lost_percent=float(m["lost_percent"]),
        max_loss_percent=float(m["max_loss_percent"]),
        max_qps_offered=int(m["max_qps_offered"]),
        ramp_seconds=int(m["ramp_seconds"]),
        queries_sent=int(m.get("queries_sent", 0)),
        queries_completed=int(m.get("queries_completed", 0)),
        resperf_max_qps=float(m.get("resperf_max_qps", 0.0)),
        resperf=tuple(str(a) for a in m.get("resperf", ())),
        queries=queries,
        runs=tuple(_run(r) for r in m.get("runs", ())),
        spread=None if spread is None else float(spread),
        contradictions=contradictions,
    )


def _run(r: Any) -> RunRecord:
    if not isinstance(r, dict):
        raise TypeError("runs: expected objects")
    return RunRecord(
        capacity_qps=float(r["capacity_qps"]),
        limit=str(r["limit"]),
        lost_percent=float(r["lost_percent"]),
        loss_spikes=int(r["loss_spikes"]),
        fell_behind=bool(r["fell_behind"]),
        client_cpu_seconds=float(r["client_cpu_seconds"]),
        wall_seconds=float(r["wall_seconds"]),
        send_seconds=float(r.get("send_seconds", 0.0)),
        queries_sent=int(r.get("queries_sent", 0)),
        queries_completed=int(r.get("queries_completed", 0)),
        resperf_max_qps=float(r.get("resperf_max_qps", 0.0)),
    )


def _v1_measurement(m: Any) -> Measurement:
    """A version 1 file (one figure per resolver, before miss runs): a cache-hit run whose
    lower-bound status and loss limit were never recorded (limit "unknown", max_loss 0)."""
    return Measurement(
        kind="hit",
        capacity_qps=float(m["capacity_qps"]),
        lower_bound=False,
        limit="unknown",
        measured_at=float(m["measured_at"]),
        lost_percent=float(m["lost_percent"]),
        max_loss_percent=0.0,
        max_qps_offered=int(m["max_qps_offered"]),
        ramp_seconds=int(m["ramp_seconds"]),
    )


State = dict[str, dict[str, Measurement]]


def parse_state(text: str) -> State:
    """Pure: state file text -> {address key: {kind: measurement}}. Raises ValueError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version not in (1, STATE_VERSION):
        raise ValueError(f"not a dnsfleet capacity file (want version {STATE_VERSION})")
    targets = doc.get("targets")
    if not isinstance(targets, dict):
        raise ValueError("targets: expected an object")
    out: State = {}
    for key, entry in targets.items():
        try:
            if version == 1:
                out[key] = {"hit": _v1_measurement(entry)}
                continue
            if not isinstance(entry, dict):
                raise TypeError("expected an object of kinds")
            unknown = set(entry) - set(KINDS)
            if unknown:
                raise ValueError(f"unknown kind {sorted(unknown)[0]!r} (want hit or miss)")
            out[key] = {kind: _measurement(kind, m) for kind, m in entry.items()}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"targets.{key}: {type(e).__name__}: {e}") from None
    return out


def format_state(state: Mapping[str, Mapping[str, Measurement]]) -> str:
    def one(m: Measurement) -> dict[str, Any]:
        d = dataclasses.asdict(m)
        del d["kind"]
        if m.queries is None:
            del d["queries"]
        for r, run in zip(d.get("runs", ()), m.runs, strict=True):
            # Recorded for the reader of the file; derived, so not read back.
            r["client_cpu_share"] = round(run.client_cpu_share, 3)
        return d

    doc: dict[str, Any] = {
        "version": STATE_VERSION,
        "targets": {
            k: {kind: one(m) for kind, m in sorted(kinds.items())}
            for k, kinds in sorted(state.items())
        },
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def read_state(path: str) -> State:
    """{} when the file does not exist; ValueError/OSError when it cannot be trusted."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return {}
    if len(raw) > MAX_STATE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_STATE_BYTES} bytes")
    try:
        return parse_state(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None


@contextlib.contextmanager
def atomic_file(path: str, prefix: str) -> Iterator[BinaryIO]:
    """A file that appears at ``path`` whole or not at all: written beside it, synced,
    renamed over it; removed if the writer fails."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def record(path: str, key: str, m: Measurement) -> None:
    """Add one measurement, keeping the others (other resolvers, the other kind)."""
    state = read_state(path)
    state.setdefault(key, {})[m.kind] = m
    with atomic_file(path, ".capacity.") as fh:
        fh.write(format_state(state).encode("utf-8"))
