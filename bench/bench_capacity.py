"""Cache-hit against cache-miss capacity of unbound and BIND on loopback, measured with
`dnsfleet capacity-test --kind both` (resperf). The upstream is a BIND authoritative server
for a wildcard test zone on loopback (optionally behind dnsdist's DelayAction, to play an
upstream some milliseconds away). Prints each figure, whether it is a lower bound, resperf's
own figure (which counts SERVFAIL answers as throughput), and the effective capacity of
workloads at several cache-hit ratios.

    .venv/bin/python bench/bench_capacity.py --max-qps 60000 --ramp 10
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

from tests.harness.resolverfamilies import Dnsdist
from tests.harness.servers import Named, Unbound

from dnsfleet.capacity.model import Measurement, effective_capacity, read_state
from dnsfleet.cli import main as dnsfleet_main
from dnsfleet.config import Endpoint

ZONE = "cap.test"


def measure(address: str, state: Path, args: argparse.Namespace) -> dict[str, Measurement]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = dnsfleet_main(
            [
                "capacity-test",
                "--target",
                address,
                "--query",
                f"www.{ZONE}/A",
                "--miss-zone",
                ZONE,
                "--max-qps",
                str(args.max_qps),
                "--ramp",
                str(args.ramp),
                "--max-loss",
                str(args.max_loss),
                "--state-file",
                str(state),
                "--yes",
            ]
        )
    if rc != 0:
        raise SystemExit(f"capacity-test against {address} failed:\n{err.getvalue()}")
    return read_state(str(state))[Endpoint.parse(address).key()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-qps", type=int, default=60000)
    p.add_argument("--ramp", type=int, default=10)
    p.add_argument("--max-loss", type=float, default=1.0)
    p.add_argument(
        "--upstream-delay-ms",
        type=int,
        default=0,
        help="put dnsfleet's upstream behind dnsdist's DelayAction (default 0)",
    )
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dnsfleet-bench-capacity-") as tmp:
        work = Path(tmp)
        auth = Named(
            work / "auth", zones={ZONE: "*   IN A 192.0.2.7\nwww IN A 192.0.2.8\n"}, ttl=3600
        ).start()
        stack = contextlib.ExitStack()
        stack.callback(auth.stop)
        upstream = auth.address
        if args.upstream_delay_ms:
            delay = Dnsdist(
                work / "dnsdist",
                backends={"auth": auth.address},
                check_name=f"{ZONE}.",
                extra=f"addAction(AllRule(), DelayAction({args.upstream_delay_ms}))",
            )
            delay.start()
            stack.callback(delay.stop)
            upstream = delay.address
        up_host, up_port = upstream.rsplit(":", 1)
        with stack:
            unbound = Unbound(work / "unbound", stubs={f"{ZONE}.": f"{up_host}@{up_port}"})
            bind = Named(
                work / "bind",
                zones={},
                recursion=True,
                extra_options=(f"forward only; forwarders {{ {up_host} port {up_port}; }};"),
            )
            print(
                f"resperf ramp to {args.max_qps} qps over {args.ramp}s, loss limit "
                f"{args.max_loss:g}%, upstream delay {args.upstream_delay_ms} ms; one "
                "resolver thread each (unbound num-threads 1, named -n 1)"
            )
            print(f"{'resolver':10} {'kind':5} {'qps':>9} {'bound':>6} {'resperf':>9}")
            rows = []
            for name, server in (("unbound", unbound), ("bind", bind)):
                server.start()
                try:
                    got = measure(server.address, work / f"{name}.json", args)
                finally:
                    server.stop()
                for kind in ("hit", "miss"):
                    m = got[kind]
                    print(
                        f"{name:10} {kind:5} {m.capacity_qps:9.0f} "
                        f"{'lower' if m.lower_bound else 'limit':>6} "
                        f"{m.resperf_max_qps:9.0f}"
                    )
                rows.append((name, got["hit"].capacity_qps, got["miss"].capacity_qps))
            print("\neffective capacity 1 / (h / C_hit + (1 - h) / C_miss) at cache-hit ratio h:")
            print(
                f"{'resolver':10} {'hit/miss':>8} "
                + " ".join(f"{f'h={h:g}':>8}" for h in (1.0, 0.95, 0.9, 0.8, 0.5, 0.0))
            )
            for name, c_hit, c_miss in rows:  # capacity-test refuses to record 0
                print(
                    f"{name:10} {c_hit / c_miss:8.1f} "
                    + " ".join(
                        f"{effective_capacity(h, c_hit, c_miss):8.0f}"
                        for h in (1.0, 0.95, 0.9, 0.8, 0.5, 0.0)
                    )
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
