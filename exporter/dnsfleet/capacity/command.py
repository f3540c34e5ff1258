"""``dnsfleet capacity-test``: runs resperf (Debian dnsperf) against one resolver in a
maintenance window and records two figures in the state file of capacity/model.py; the exporter
reads that file and exports ``dnsfleet_resolver_capacity_qps{kind=...}``.

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
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import dns.exception
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype

from dnsfleet.capacity.model import KINDS, Measurement, QueryFile, read_state, record
from dnsfleet.capacity.queries import (
    MAX_MISS_NAMES,
    miss_name_count,
    miss_names,
    write_query_file,
)
from dnsfleet.capacity.runs import (
    MIN_CLIENT_CPU_SHARE,
    RunOutput,
    cross_check,
    describe,
    measure_runs,
    warning,
)
from dnsfleet.config import Endpoint
from dnsfleet.parsers.resperf import capacity_from_plot, parse_plot, parse_resperf

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


RunResult = RunOutput  # one resperf run (capacity/runs.py judges it)


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
        # This command runs one child at a time: the children's rusage delta is resperf's.
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=ramp + 60, check=False, cwd=tmp
        )
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
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
        points=points,
        client_cpu_seconds=cpu,
        wall_seconds=wall,
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
    runs: int = 1,
    min_client_cpu: float = MIN_CLIENT_CPU_SHARE,
) -> Measurement:
    """``runs`` resperf runs of one kind, judged and summed up (capacity/runs.py)."""

    def once() -> RunOutput:
        return run_resperf(
            host=host,
            port=port,
            datafile=datafile,
            max_qps=max_qps,
            ramp=ramp,
            max_loss=max_loss,
            repeat=kind == "hit",
        )

    return measure_runs(
        kind,
        once,
        runs=runs,
        max_qps=max_qps,
        ramp=ramp,
        max_loss=max_loss,
        min_client_cpu=min_client_cpu,
        queries=queries,
    )


# ------------------------------------------------------------------ command line


def _fail(msg: str, code: int = 2) -> int:
    print(f"dnsfleet capacity-test: {msg}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    try:
        endpoint = Endpoint.parse(args.target)
    except ValueError as e:
        return _fail(f"--target: {e}")
    kind = args.kind or ("both" if args.miss_zone else "hit")
    kinds = KINDS if kind == "both" else (kind,)
    names = miss_name_count(args.max_qps, args.ramp)
    refusal = _refusal(args, kinds, names)
    if refusal is not None:
        return _fail(refusal)
    host, port, key = endpoint.host, endpoint.port, endpoint.key()
    plan = (
        f"resperf against {key} ({' and '.join(f'cache-{k}' for k in kinds)}, "
        f"{args.runs} run{'s' if args.runs > 1 else ''} each): ramp to "
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
            qf = _query_file(args, k, host=host, port=port, path=path, run=run, names=names)
            m = measure(
                kind=k,
                host=host,
                port=port,
                datafile=path,
                queries=qf,
                max_qps=args.max_qps,
                ramp=args.ramp,
                max_loss=args.max_loss,
                runs=args.runs,
                min_client_cpu=args.min_client_cpu,
            )
            results.append(m)
        return _finish(args, key, results)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        return _fail(str(e), 1)


def _refusal(args: argparse.Namespace, kinds: tuple[str, ...], names: int) -> str | None:
    """What is wrong with the flags, if anything: checked before anything is sent."""
    if "hit" in kinds and not args.queries:
        return "the cache-hit run needs at least one --query NAME[/TYPE]"
    if "miss" in kinds and not args.miss_zone:
        return "the cache-miss run needs --miss-zone ZONE (a wildcard zone you serve)"
    try:
        dns.rdatatype.from_text(args.miss_type)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        return f"--miss-type: unknown query type {args.miss_type!r}"
    if args.max_qps < 1 or args.ramp < 1 or not 0 <= args.max_loss <= 100:
        return "--max-qps and --ramp must be positive, --max-loss within 0..100"
    if not 1 <= args.runs <= 20 or not 0 <= args.min_client_cpu <= 1:
        return "--runs within 1..20, --min-client-cpu within 0..1"
    if "miss" in kinds and names > MAX_MISS_NAMES:
        return (
            f"a miss run of this ramp needs {names} unique names (over "
            f"{MAX_MISS_NAMES}); shorten --ramp or lower --max-qps"
        )
    return None


def _query_file(
    args: argparse.Namespace, kind: str, *, host: str, port: int, path: str, run: str, names: int
) -> QueryFile:
    """The query file of one run: the --query names (cache warmed first) for a hit run,
    ``names`` unique names under the wildcard zone (checked first) for a miss run."""
    if kind == "hit":
        warm(host, port, args.queries)
        count, digest = write_query_file(path, list(args.queries))
        return QueryFile(path=path, count=count, sha256=digest)
    check_miss_zone(host, port, args.miss_zone, args.miss_type, run)
    count, digest = write_query_file(
        path, (f"{n} {args.miss_type}" for n in miss_names(args.miss_zone, names, run))
    )
    return QueryFile(path=path, count=count, sha256=digest, zone=args.miss_zone)


def _finish(args: argparse.Namespace, key: str, results: list[Measurement]) -> int:
    """Check hit against miss (the other kind as recorded when only one ran), record, and
    say so: a contradiction as a warning, a capacity as what it is. Exit status 3 when
    the sending client set the limit (nothing usable was recorded)."""
    recorded = read_state(args.state_file).get(key, {})
    both = cross_check({**recorded, **{m.kind: m for m in results}})
    for kind, m in both.items():
        if m == recorded.get(kind):
            continue
        record(args.state_file, key, m)
        if m.contradictions:
            print(warning(key, m, args.min_client_cpu), file=sys.stderr)
        else:
            print(f"{key}: {describe(m)}", file=sys.stderr)
    for m in (both[m.kind] for m in results):
        print(
            f"{key}: {m.kind} NO capacity: {', '.join(m.contradictions)}"
            if m.contradictions
            else f"{key}: {m.kind} capacity {m.capacity_qps:.0f} qps"
            f"{' (lower bound)' if m.lower_bound else ''}; {m.queries_completed}/"
            f"{m.queries_sent} queries answered; recorded in {args.state_file}"
        )
    return 3 if any("client_bound" in both[m.kind].contradictions for m in results) else 0
