"""Resolver capacity: ``dnsfleet capacity-test`` runs resperf (Debian dnsperf) against one
resolver in a maintenance window and records the figure in a state file; the exporter reads
that file and exports ``dnsfleet_resolver_capacity_qps``.

resperf ramps the offered load from 0 to ``--max-qps`` over ``--ramp`` seconds and reports
the highest throughput reached before the loss passed ``--max-loss`` percent. It sends real
load: the command refuses to run without ``--yes``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dns.rdatatype

from dnsfleet.config import DEFAULT_CAPACITY_FILE, parse_address
from dnsfleet.parsers.resperf import ResperfResult, parse_resperf

STATE_VERSION = 1
MAX_STATE_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Measurement:
    capacity_qps: float
    measured_at: float       # epoch seconds
    lost_percent: float
    max_qps_offered: int
    ramp_seconds: int


def address_key(host: str, port: int) -> str:
    """One spelling per resolver address, whatever the config or command line wrote."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_state(text: str) -> dict[str, Measurement]:
    """Pure: state file text -> measurements by address key. Raises ValueError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
        raise ValueError(f"not a dnsfleet capacity file (want version {STATE_VERSION})")
    targets = doc.get("targets")
    if not isinstance(targets, dict):
        raise ValueError("targets: expected an object")
    out: dict[str, Measurement] = {}
    for key, m in targets.items():
        try:
            out[key] = Measurement(
                capacity_qps=float(m["capacity_qps"]), measured_at=float(m["measured_at"]),
                lost_percent=float(m["lost_percent"]),
                max_qps_offered=int(m["max_qps_offered"]), ramp_seconds=int(m["ramp_seconds"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"targets.{key}: {type(e).__name__}: {e}") from None
    return out


def format_state(measurements: Mapping[str, Measurement]) -> str:
    doc: dict[str, Any] = {"version": STATE_VERSION,
                           "targets": {k: dataclasses.asdict(m)
                                       for k, m in sorted(measurements.items())}}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def read_state(path: str) -> dict[str, Measurement]:
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


def record(path: str, key: str, m: Measurement) -> None:
    """Add one measurement, keeping the others; atomic (write a temp file, rename)."""
    state = read_state(path)
    state[key] = m
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".capacity.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(format_state(state))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _query_line(text: str) -> str:
    name, _, qtype = text.partition("/")
    qtype = (qtype or "A").upper()
    try:
        dns.rdatatype.from_text(qtype)
    except (dns.rdatatype.UnknownRdatatype, ValueError):
        raise argparse.ArgumentTypeError(f"unknown query type in {text!r}") from None
    if not name or any(c.isspace() for c in name):
        raise argparse.ArgumentTypeError(f"invalid query {text!r}: want NAME[/TYPE]")
    return f"{name} {qtype}"


def resperf_command(*, host: str, port: int, datafile: str, max_qps: int, ramp: int,
                    max_loss: float) -> list[str]:
    exe = shutil.which("resperf") or "/usr/bin/resperf"
    # -t 2: after the ramp resperf waits this long for stragglers (default 45 s).
    # -P /dev/null: resperf writes a gnuplot file into the working directory otherwise.
    # -R: start the query file over at its end (a few cached names serve a whole ramp).
    return [exe, "-f", "inet6" if ":" in host else "inet", "-s", host, "-p", str(port),
            "-d", datafile, "-R", "-m", str(max_qps), "-r", str(ramp), "-c", "0",
            "-L", f"{max_loss:g}", "-t", "2", "-P", os.devnull]


def run_resperf(*, host: str, port: int, queries: list[str], max_qps: int, ramp: int,
                max_loss: float) -> ResperfResult:
    with tempfile.NamedTemporaryFile("w", prefix="dnsfleet-resperf-", suffix=".txt") as fh:
        fh.write("\n".join(queries) + "\n")
        fh.flush()
        cmd = resperf_command(host=host, port=port, datafile=fh.name, max_qps=max_qps,
                              ramp=ramp, max_loss=max_loss)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=ramp + 60,
                              check=False, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        raise RuntimeError(f"resperf exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    return parse_resperf(proc.stdout)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="resolver address, e.g. 127.0.0.1:53")
    p.add_argument("--query", dest="queries", action="append", type=_query_line, default=[],
                   metavar="NAME[/TYPE]",
                   help="a query to send (repeatable); pick names the resolver has cached "
                        "or serves itself, so the test measures the resolver, not upstream")
    p.add_argument("--max-qps", type=int, default=100000,
                   help="highest offered load of the ramp (default 100000)")
    p.add_argument("--ramp", type=int, default=60, help="ramp duration in seconds (default 60)")
    p.add_argument("--max-loss", type=float, default=1.0,
                   help="acceptable query loss in percent (default 1)")
    p.add_argument("--state-file", default=DEFAULT_CAPACITY_FILE,
                   help=f"where the figure is recorded (default {DEFAULT_CAPACITY_FILE}; the "
                        "exporter reads resolver.capacity_file)")
    p.add_argument("--yes", action="store_true",
                   help="confirm: this loads the resolver to its limit (maintenance window)")


def main(args: argparse.Namespace) -> int:
    try:
        host, port, _ = parse_address(args.target)
    except ValueError as e:
        print(f"dnsfleet capacity-test: --target: {e}", file=sys.stderr)
        return 2
    if not args.queries:
        print("dnsfleet capacity-test: give at least one --query NAME[/TYPE]", file=sys.stderr)
        return 2
    if args.max_qps < 1 or args.ramp < 1 or not 0 <= args.max_loss <= 100:
        print("dnsfleet capacity-test: --max-qps and --ramp must be positive, --max-loss "
              "within 0..100", file=sys.stderr)
        return 2
    key = address_key(host, port)
    plan = (f"resperf against {key}: ramp to {args.max_qps} qps over {args.ramp}s, "
            f"stop at {args.max_loss:g}% loss")
    if not args.yes:
        print(f"dnsfleet capacity-test would run {plan}.\nThis loads the resolver to its "
              "limit; run it in a maintenance window and pass --yes.", file=sys.stderr)
        return 2
    print(f"running {plan} ...", file=sys.stderr)
    try:
        result = run_resperf(host=host, port=port, queries=args.queries, max_qps=args.max_qps,
                             ramp=args.ramp, max_loss=args.max_loss)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        print(f"dnsfleet capacity-test: {e}", file=sys.stderr)
        return 1
    m = Measurement(capacity_qps=result.max_qps, measured_at=time.time(),
                    lost_percent=result.lost_percent, max_qps_offered=args.max_qps,
                    ramp_seconds=args.ramp)
    try:
        record(args.state_file, key, m)
    except (OSError, ValueError) as e:
        print(f"dnsfleet capacity-test: cannot record in {args.state_file}: {e}",
              file=sys.stderr)
        return 1
    if result.max_qps >= args.max_qps * 0.95:
        print(f"note: the resolver kept up with the whole ramp; {result.max_qps:.0f} qps is a "
              "lower bound (raise --max-qps)", file=sys.stderr)
    print(f"{key}: capacity {result.max_qps:.0f} qps (lost {result.lost_percent:g}% at that "
          f"point; {result.queries_completed}/{result.queries_sent} queries answered); "
          f"recorded in {args.state_file}")
    return 0


SUBCOMMAND = (add_args, main, "measure a resolver's capacity with resperf and record it")
