"""Resolver capacity: ``dnsfleet capacity-test`` runs resperf (Debian dnsperf) against one
resolver in a maintenance window and records two figures in a state file; the exporter reads
that file and exports ``dnsfleet_resolver_capacity_qps{kind=...}``.

A resolver answers a cached name from memory and a name it has never seen by asking
upstream: the two cost an order of magnitude apart (a published BIND study measured 106,508
qps on cache hits and 10,552 qps on unique names). So capacity is measured twice:

- ``hit``: the names given with ``--query``, asked once before the run so they are cached,
  then repeated for the whole ramp;
- ``miss``: names nobody asked before (a fresh random label per query and run) under a zone
  the operator serves and names with ``--miss-zone`` (a wildcard in a test zone), so every
  query is a cache miss that the resolver must resolve.

The capacity of a workload with cache-hit ratio h is then the harmonic mix of the two
(``effective_capacity``): each query costs h/C_hit + (1-h)/C_miss seconds of the resolver.

resperf ramps the offered load from 0 to ``--max-qps`` over ``--ramp`` seconds and reports the
highest throughput reached before the loss passed ``--max-loss`` percent. The figure recorded
applies that rule to resperf's per-bucket plot with failed answers (SERVFAIL: a resolver
out of recursion slots) counted as lost (parsers/resperf.py). When the loss never passed
the limit, the figure is the ramp's limit, not the resolver's: it is recorded as a lower
bound.
The command sends real load: it refuses to run without ``--yes``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import dns.exception
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype

from dnsfleet.config import Endpoint
from dnsfleet.parsers.resperf import (
    PlotCapacity,
    ResperfResult,
    capacity_from_plot,
    parse_plot,
    parse_resperf,
)

STATE_VERSION = 2
MAX_STATE_BYTES = 4 << 20
KINDS = ("hit", "miss")
# Why a run stopped climbing: the loss limit (a real capacity), the end of the ramp, or the
# sending client falling behind its schedule (both: the figure is a lower bound).
LIMITS = ("loss", "ramp", "client", "unknown")
# More unique names than this would make a query file of gigabytes: ask for a shorter ramp.
MAX_MISS_NAMES = 20_000_000


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


def effective_capacity(hit_ratio: float, c_hit: float, c_miss: float) -> float:
    """Queries per second a resolver can answer when ``hit_ratio`` of them hit the cache:
    a query costs 1/C_hit or 1/C_miss seconds of the resolver, so the mix costs the weighted
    mean of the two and the capacity is its inverse (a weighted harmonic mean). Mirrors
    ``target:dnsfleet_resolver_capacity_effective:qps`` in alerts/rules/capacity.rules.yml."""
    if not 0 <= hit_ratio <= 1 or c_hit <= 0 or c_miss <= 0:
        raise ValueError("hit_ratio within 0..1 and positive capacities, please")
    return 1 / (hit_ratio / c_hit + (1 - hit_ratio) / c_miss)


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
def _atomic_file(path: str, prefix: str) -> Iterator[BinaryIO]:
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
    with _atomic_file(path, ".capacity.") as fh:
        fh.write(format_state(state).encode("utf-8"))


# ------------------------------------------------------------------ query files


def query_line(text: str) -> str:
    """``NAME[/TYPE]`` on the command line -> a resperf query line."""
    name, _, qtype = text.partition("/")
    qtype = (qtype or "A").upper()
    try:
        dns.rdatatype.from_text(qtype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise argparse.ArgumentTypeError(f"unknown query type in {text!r}") from None
    if not name or any(c.isspace() for c in name):
        raise argparse.ArgumentTypeError(f"invalid query {text!r}: want NAME[/TYPE]")
    return f"{name} {qtype}"


def zone_arg(text: str) -> str:
    """``--miss-zone``: a DNS name, not the root."""
    try:
        zone = dns.name.from_text(text).to_text()
    except dns.exception.DNSException as e:
        raise argparse.ArgumentTypeError(f"invalid zone {text!r}: {e}") from None
    if zone == ".":
        raise argparse.ArgumentTypeError("--miss-zone: the root is not a test zone")
    return zone


def miss_name_count(max_qps: int, ramp: int) -> int:
    """Names for a whole ramp without repeating one: a linear ramp from 0 to max_qps over
    ramp seconds sends max_qps * ramp / 2 queries; 5 % spare for resperf's rounding."""
    return math.ceil(max_qps * ramp / 2 * 1.05) + 100


def miss_names(zone: str, count: int, run: str) -> Iterator[str]:
    """Unique names under ``zone``: the run id makes them new to the resolver even after
    earlier runs (which cached their own names)."""
    for i in range(count):
        yield f"q{i}-{run}.{zone}"


def write_query_file(path: str, lines: Iterator[str] | list[str]) -> tuple[int, str]:
    """Write lines atomically; return (count, sha256 of the file)."""
    digest = hashlib.sha256()
    count = 0
    with _atomic_file(path, ".queries.") as fh:
        for line in lines:
            raw = (line + "\n").encode("ascii")
            digest.update(raw)
            fh.write(raw)
            count += 1
    return count, digest.hexdigest()


# ------------------------------------------------------------------ running resperf


def resperf_command(
    *,
    host: str,
    port: int,
    datafile: str,
    plotfile: str,
    max_qps: int,
    ramp: int,
    max_loss: float,
    repeat: bool,
) -> list[str]:
    exe = shutil.which("resperf") or "/usr/bin/resperf"
    # -t 2: after the ramp resperf waits this long for stragglers (default 45 s).
    # -P: the per-bucket plot, from which lower bounds are told apart (parsers/resperf.py).
    # -R (cache-hit runs only): start the query file over at its end, so a few cached names
    # serve a whole ramp. A miss run must never repeat a name: it would hit the cache.
    cmd = [
        exe,
        "-f",
        "inet6" if ":" in host else "inet",
        "-s",
        host,
        "-p",
        str(port),
        "-d",
        datafile,
        "-m",
        str(max_qps),
        "-r",
        str(ramp),
        "-c",
        "0",
        "-L",
        f"{max_loss:g}",
        "-t",
        "2",
        "-P",
        plotfile,
    ]
    if repeat:
        cmd.insert(cmd.index("-m"), "-R")
    return cmd


@dataclass(frozen=True, slots=True)
class RunResult:
    result: ResperfResult  # resperf's summary (its figure counts SERVFAIL as served)
    plot: PlotCapacity  # the figure from the plot, failures counted as lost
    command: tuple[str, ...]


def run_resperf(
    *, host: str, port: int, datafile: str, max_qps: int, ramp: int, max_loss: float, repeat: bool
) -> RunResult:
    with tempfile.TemporaryDirectory(prefix="dnsfleet-resperf-") as tmp:
        plotfile = os.path.join(tmp, "resperf.plot")
        cmd = resperf_command(
            host=host,
            port=port,
            datafile=datafile,
            plotfile=plotfile,
            max_qps=max_qps,
            ramp=ramp,
            max_loss=max_loss,
            repeat=repeat,
        )
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=ramp + 60, check=False, cwd=tmp
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"resperf exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-500:]}"
            )
        with open(plotfile, encoding="ascii") as fh:
            points = parse_plot(fh.read())
    return RunResult(
        result=parse_resperf(proc.stdout),
        plot=capacity_from_plot(points, max_loss),
        command=tuple(cmd),
    )


def ask(host: str, port: int, name: str, qtype: str, timeout: float = 2.0) -> dns.message.Message:
    """One query over UDP (warming the cache, checking the miss zone)."""
    q = dns.message.make_query(name, qtype)
    return dns.query.udp(q, host, port=port, timeout=timeout)


def warm(host: str, port: int, lines: list[str]) -> None:
    """Ask every cache-hit name once so the run measures answers from the cache. Raises
    RuntimeError naming the first name that got no usable answer."""
    for line in lines:
        name, qtype = line.split()
        try:
            r = ask(host, port, name, qtype)
        except (dns.exception.DNSException, OSError) as e:
            raise RuntimeError(f"warming {name}/{qtype}: {type(e).__name__}: {e}") from None
        if r.rcode() not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
            raise RuntimeError(
                f"warming {name}/{qtype}: {dns.rcode.to_text(r.rcode())} "
                "(a SERVFAIL name measures the failure path, not the cache)"
            )


def check_miss_zone(host: str, port: int, zone: str, qtype: str, run: str) -> None:
    """A unique name under the zone must resolve (NOERROR with an answer): otherwise the
    run measures NXDOMAIN or SERVFAIL handling, or a zone nobody serves."""
    name = f"check-{run}.{zone}"
    try:
        r = ask(host, port, name, qtype)
    except (dns.exception.DNSException, OSError) as e:
        raise RuntimeError(f"--miss-zone: {name}/{qtype}: {type(e).__name__}: {e}") from None
    if r.rcode() != dns.rcode.NOERROR or not r.answer:
        raise RuntimeError(
            f"--miss-zone: {name}/{qtype} gave {dns.rcode.to_text(r.rcode())} with "
            f"{len(r.answer)} answer records; the zone must answer every name (a wildcard "
            "record in a zone you serve)"
        )


def measure(
    *,
    kind: str,
    host: str,
    port: int,
    datafile: str,
    queries: QueryFile,
    max_qps: int,
    ramp: int,
    max_loss: float,
) -> Measurement:
    run = run_resperf(
        host=host,
        port=port,
        datafile=datafile,
        max_qps=max_qps,
        ramp=ramp,
        max_loss=max_loss,
        repeat=kind == "hit",
    )
    r, plot = run.result, run.plot
    if plot.limit_reached and plot.capacity_qps == 0:
        raise RuntimeError(
            f"the {kind} run lost or failed more than {max_loss:g}% of its queries from the "
            "first bucket on: no capacity to record (is the resolver answering? else start "
            "lower: a smaller --max-qps or a longer --ramp)"
        )
    limit = "loss" if plot.limit_reached else "client" if r.fell_behind else "ramp"
    return Measurement(
        kind=kind,
        capacity_qps=plot.capacity_qps,
        lower_bound=not plot.limit_reached,
        limit=limit,
        measured_at=time.time(),
        lost_percent=plot.unserved_percent,
        max_loss_percent=max_loss,
        resperf_max_qps=r.max_qps,
        max_qps_offered=max_qps,
        ramp_seconds=ramp,
        queries_sent=r.queries_sent,
        queries_completed=r.queries_completed,
        resperf=run.command,
        queries=queries,
    )


# ------------------------------------------------------------------ command line


def _fail(msg: str, code: int = 2) -> int:
    print(f"dnsfleet capacity-test: {msg}", file=sys.stderr)
    return code


def _describe(m: Measurement) -> str:
    bound = {
        "loss": f"the loss passed {m.max_loss_percent:g}% above it",
        "ramp": f"a LOWER BOUND: the loss never passed {m.max_loss_percent:g}% up to the end "
        f"of the ramp (raise --max-qps above {m.max_qps_offered})",
        "client": "a LOWER BOUND: resperf fell behind its schedule (the sending host is the "
        "limit; run it from a bigger host or several)",
    }.get(m.limit, "")
    return (
        f"{m.kind} capacity {m.capacity_qps:.0f} qps answered (resperf's figure, failures "
        f"included: {m.resperf_max_qps:.0f}), {m.lost_percent:.2f}% lost or failed at that "
        f"point; {bound}"
    )


def main(args: argparse.Namespace) -> int:
    try:
        endpoint = Endpoint.parse(args.target)
    except ValueError as e:
        return _fail(f"--target: {e}")
    kind = args.kind or ("both" if args.miss_zone else "hit")
    kinds = KINDS if kind == "both" else (kind,)
    if "hit" in kinds and not args.queries:
        return _fail("the cache-hit run needs at least one --query NAME[/TYPE]")
    if "miss" in kinds and not args.miss_zone:
        return _fail("the cache-miss run needs --miss-zone ZONE (a wildcard zone you serve)")
    try:
        dns.rdatatype.from_text(args.miss_type)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        return _fail(f"--miss-type: unknown query type {args.miss_type!r}")
    if args.max_qps < 1 or args.ramp < 1 or not 0 <= args.max_loss <= 100:
        return _fail("--max-qps and --ramp must be positive, --max-loss within 0..100")
    names = miss_name_count(args.max_qps, args.ramp)
    if "miss" in kinds and names > MAX_MISS_NAMES:
        return _fail(
            f"a miss run of this ramp needs {names} unique names (over "
            f"{MAX_MISS_NAMES}); shorten --ramp or lower --max-qps"
        )
    host, port, key = endpoint.host, endpoint.port, endpoint.key()
    plan = (
        f"resperf against {key} ({' and '.join(f'cache-{k}' for k in kinds)}): ramp to "
        f"{args.max_qps} qps over {args.ramp}s, stop at {args.max_loss:g}% loss"
    )
    if not args.yes:
        print(
            f"dnsfleet capacity-test would run {plan}.\nThis loads the resolver to its "
            "limit; run it in a maintenance window and pass --yes.",
            file=sys.stderr,
        )
        return 2
    run = f"{int(time.time())}-{secrets.token_hex(3)}"
    query_dir = args.query_dir or os.path.join(
        os.path.dirname(os.path.abspath(args.state_file)), "queries"
    )
    safe_key = key.replace("[", "").replace("]", "").replace(":", "_")
    print(f"running {plan} ...", file=sys.stderr)
    results: list[Measurement] = []
    try:
        for k in kinds:
            path = os.path.join(query_dir, f"{safe_key}-{k}-{run}.txt")
            if k == "hit":
                warm(host, port, args.queries)
                count, digest = write_query_file(path, list(args.queries))
                qf = QueryFile(path=path, count=count, sha256=digest)
            else:
                check_miss_zone(host, port, args.miss_zone, args.miss_type, run)
                count, digest = write_query_file(
                    path, (f"{n} {args.miss_type}" for n in miss_names(args.miss_zone, names, run))
                )
                qf = QueryFile(path=path, count=count, sha256=digest, zone=args.miss_zone)
            m = measure(
                kind=k,
                host=host,
                port=port,
                datafile=path,
                queries=qf,
                max_qps=args.max_qps,
                ramp=args.ramp,
                max_loss=args.max_loss,
            )
            record(args.state_file, key, m)
            results.append(m)
            print(f"{key}: {_describe(m)}", file=sys.stderr)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        return _fail(str(e), 1)
    for m in results:
        print(
            f"{key}: {m.kind} capacity {m.capacity_qps:.0f} qps"
            f"{' (lower bound)' if m.lower_bound else ''}; {m.queries_completed}/"
            f"{m.queries_sent} queries answered; recorded in {args.state_file}"
        )
    return 0
