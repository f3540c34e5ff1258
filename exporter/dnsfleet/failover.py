"""``dnsfleet failover``: what a client of this resolv.conf suffers right now.

Probes each nameserver as the client would and prints, per nameserver, its state and the
seconds it costs a lookup that reaches it, then the total a lookup suffers. Reads the file
directly (no --path.rootfs: an operator points it at the file they mean). Its flags are
parsed in cli.py with every other command's.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from dnsfleet.collectors.stub import FileReport, assess
from dnsfleet.config import ResolvConfWatch, parse_duration
from dnsfleet.config.values import duration_problem
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.resolvconf import ResolvConf
from dnsfleet.stubmodel import ServerState, Verdict, vip_pinned

ADVICE = {
    ServerState.SILENT: "drops queries: every lookup that reaches it waits the full timeout",
    ServerState.REFUSED: "host up, DNS down: clients move on at once",
    ServerState.UNREACHABLE: "network reports it unreachable",
    ServerState.SERVFAIL: "answers SERVFAIL: clients move on at once",
    ServerState.RCODE_REFUSED: "answers REFUSED: clients move on at once",
    ServerState.ERROR: "broken exchange: clients move on",
    ServerState.ANSWERING: "answers",
}


def _vip_line(conf: ResolvConf, libc: str) -> str:
    """A single nameserver is most often a service VIP (Kubernetes' cluster DNS)."""
    v = vip_pinned(
        backends=2, dead=1, timeout=max(conf.timeout, 1), attempts=conf.attempts, libc=libc
    )
    return (
        "  one nameserver: every retry of a name leaves from one source port, so behind a "
        "service VIP conntrack pins them all to one backend: with one of two backends silent, "
        f"{v.failing_share:.0%} of the names a lookup tries fail, after {v.pinned_cost:.0f} s "
        f"each (not {v.unpinned_failing_share:.0%}), until the endpoint is removed"
    )


def render_report(rep: FileReport, libc: str) -> str:
    if rep.conf is None:
        return f"{rep.watch.path}: cannot assess: {rep.detail}\n"
    conf = rep.conf
    verdict: Verdict = next(v for v in rep.verdicts if v.libc == libc)
    lines = [
        f"{rep.watch.path}: {len(conf.servers)} nameserver(s), timeout {conf.timeout}, "
        f"attempts {conf.attempts}"
        + (", rotate" if conf.rotate else "")
        + (", use-vc" if conf.use_vc else "")
        + f"; model: {libc}"
    ]
    if not conf.servers:
        lines.append("  no usable nameserver line: clients query 127.0.0.1")
    lines.append(f"  {'pos':>3}  {'nameserver':<28} {'state':<14} {'costs':>8}  note")
    for pos, (ns, out, detail) in enumerate(
        zip(rep.servers, rep.outcomes, rep.details, strict=True)
    ):
        cost = verdict.costs[pos]
        note = ADVICE[out.state]
        if (
            out.state
            not in (ServerState.ANSWERING, ServerState.SERVFAIL, ServerState.RCODE_REFUSED)
            and detail
        ):
            note += f" ({detail})"
        lines.append(f"  {pos:>3}  {ns.text:<28} {out.state.value:<14} {cost:7.3f}s  {note}")
    if verdict.failing:
        lines.append(
            f"  RESOLUTION FAILING: no nameserver answers; a lookup gives up after "
            f"{verdict.delay:.3f} s"
        )
    else:
        lines.append(
            f"  a lookup now waits {verdict.delay:.3f} s extra before its answer"
            + (
                " (average over rotate start positions: "
                + ", ".join(f"{d:.3f}" for d in verdict.delays_by_start)
                + ")"
                if verdict.delays_by_start
                else ""
            )
        )
    if len(conf.servers) == 1:
        lines.append(_vip_line(conf, libc))
    if conf.search:
        lines.append(
            f"  a relative name walks the search list ({len(conf.search)} "
            "domain(s)) and pays this once per name tried"
        )
    for p in conf.problems:
        lines.append(f"  problem: {p}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    probe_timeout = parse_duration(args.probe_timeout)
    if probe_timeout is None or probe_timeout <= 0:
        why = duration_problem(args.probe_timeout) if probe_timeout is None else "not above 0"
        print(f"--probe-timeout: {why}")
        return 2
    path = Path(args.resolv_conf).absolute()
    watch = ResolvConfWatch(
        path=str(path),
        query_name=args.query_name,
        query_type=args.query_type.upper(),
        probe_timeout=probe_timeout,
    )

    async def go() -> FileReport:
        loop = asyncio.get_running_loop()
        reports = await assess(HostFS(), (watch,), deadline=loop.time() + probe_timeout + 1)
        return reports[0]

    rep = asyncio.run(go())
    print(render_report(rep, args.libc), end="")
    if rep.conf is None:
        return 2
    verdict = next(v for v in rep.verdicts if v.libc == args.libc)
    return 1 if verdict.failing or verdict.delay >= 1 else 0
