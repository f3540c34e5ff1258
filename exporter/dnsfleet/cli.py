"""Command line: ``dnsfleet-exporter`` (the daemon) and ``dnsfleet`` (on-call tools).

Every command's flags are declared here; the modules behind the commands take the parsed
arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from dnsfleet import __version__, eventloop, failover, logs, malloc
from dnsfleet.app import Exporter
from dnsfleet.capacity.runs import MIN_CLIENT_CPU_SHARE
from dnsfleet.config import DEFAULT_CAPACITY_FILE, ConfigError, parse_address
from dnsfleet.config import schema as config_schema
from dnsfleet.endpoints.router import DEFAULT_MAX_REQUESTS, make_router
from dnsfleet.escapes import escape
from dnsfleet.hostfs import HostFS
from dnsfleet.selfmetrics import LoopLag
from dnsfleet.status.page import RUNBOOK_BASE_URL
from dnsfleet.stubmodel import LIBCS
from dnsfleet.web import config as webconfig
from dnsfleet.web import guard as webguard
from dnsfleet.web.server import serve as http_serve

DEFAULT_PORT = 9853
log = logging.getLogger("dnsfleet")


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not (port.isascii() and port.isdigit()):
        raise argparse.ArgumentTypeError(f"invalid listen address {value!r}: want [host]:port")
    host = host.strip("[]")
    if host:
        try:
            parse_address(host)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid listen address {value!r}: {e}") from None
    return host, int(port)


def exporter_parser() -> argparse.ArgumentParser:  # long: one add_argument per flag, in order
    p = argparse.ArgumentParser(
        prog="dnsfleet-exporter",
        description="Prometheus exporter for DNS resolver fleets. With no --config.file it "
        "probes the nameservers of the host's /etc/resolv.conf.",
    )
    p.add_argument(
        "--config.file",
        dest="config_file",
        default=None,
        help="YAML configuration (default: built-in, resolv.conf nameservers)",
    )
    p.add_argument(
        "--config.check",
        dest="config_check",
        action="store_true",
        help="validate the configuration, print the verdict, exit 0 or 1",
    )
    p.add_argument(
        "--web.listen-address",
        dest="listen",
        type=_listen,
        default=("", DEFAULT_PORT),
        help=f"[host]:port (default :{DEFAULT_PORT})",
    )
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        help="exporter-toolkit web configuration: TLS, basic auth (docs/configuration.md)",
    )
    p.add_argument("--web.telemetry-path", dest="telemetry_path", default="/metrics")
    p.add_argument(
        "--web.enable-lifecycle",
        dest="enable_lifecycle",
        action="store_true",
        help="allow POST/PUT /-/reload (SIGHUP works regardless)",
    )
    p.add_argument(
        "--web.max-requests",
        dest="max_requests",
        type=int,
        default=DEFAULT_MAX_REQUESTS,
        help="concurrent /metrics requests before 503 (0: no limit)",
    )
    p.add_argument(
        "--web.runbook-base-url",
        dest="runbook_base_url",
        default=RUNBOOK_BASE_URL,
        help="the status page links runbooks as BASE<AlertName>.md; set it to the "
        "runbook_base_url of your alerts/config.yml (default: this project's runbooks)",
    )
    p.add_argument("--path.procfs", dest="procfs", default="/proc")
    p.add_argument("--path.sysfs", dest="sysfs", default="/sys")
    p.add_argument("--path.rootfs", dest="rootfs", default="/")
    p.add_argument(
        "--log.level",
        dest="log_level",
        default="info",
        choices=list(logs.LEVELS),
        help="only log messages of this level or above (default info)",
    )
    p.add_argument(
        "--log.format",
        dest="log_format",
        default="logfmt",
        choices=logs.FORMATS,
        help="logfmt or json, one line per message on stderr (default logfmt)",
    )
    run_args(p)
    p.add_argument("--version", action="version", version=f"dnsfleet-exporter {__version__}")
    return p


def run_args(p: argparse.ArgumentParser) -> None:
    """How the exporter runs: on which event loop, and once or as a daemon."""
    p.add_argument(
        "--event-loop",
        dest="event_loop",
        default="auto",
        choices=eventloop.CHOICES,
        help="uvloop, asyncio's own, or auto: uvloop where it is installed (default auto)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="run one probe-and-collect cycle, print the exposition, exit",
    )


def raise_fd_limit() -> None:
    """Every in-flight probe holds a socket: lift the soft descriptor limit to the hard one,
    as Go's runtime does at start (os/rlimit.go) and blackbox_exporter so has."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _invalid(args: argparse.Namespace, text: str) -> int:
    """--config.check prints its verdict for a person; the daemon logs it like every other
    line it writes, so log shippers parse it too."""
    if args.config_check:
        print(escape(text), file=sys.stderr)
    else:
        log.error("%s", text)
    return 1


def exporter_main(argv: Sequence[str] | None = None) -> int:
    args = exporter_parser().parse_args(argv)
    logs.setup(level=args.log_level, fmt=args.log_format)
    # Before anything is measured against it (the exporter sizes probe concurrency by it).
    raise_fd_limit()
    fs = HostFS.from_flags(procfs=args.procfs, sysfs=args.sysfs, rootfs=args.rootfs)
    try:  # before the exporter starts what runs beside it (dnstap's ingest, on the same loop)
        loop = eventloop.choose(args.event_loop)
    except eventloop.Unavailable as e:
        return _invalid(args, f"--event-loop={args.event_loop}: {e}")
    try:
        exp = Exporter(fs=fs, config_file=args.config_file, background=not args.config_check)
    except ConfigError as e:
        return _invalid(args, f"configuration invalid: {e}")
    exp.runbook_base_url = args.runbook_base_url
    try:
        args.web_config = webconfig.load(args.web_config_file) if args.web_config_file else None
    except ConfigError as e:
        return _invalid(args, f"web configuration invalid: {e}")
    if args.config_check:
        cfg = exp.config
        print(
            f"configuration valid: {escape(cfg.source)}: {len(cfg.modules)} modules, "
            f"{len(cfg.targets)} targets"
        )
        return 0
    malloc.tune()
    malloc.tune_gc()
    if args.once:
        sys.stdout.buffer.write(eventloop.run(exp.scrape(), loop))
        return 0
    args.loop = loop
    return eventloop.run(serve(exp, args), loop)


async def serve(exp: Exporter, args: argparse.Namespace) -> int:
    router = make_router(
        exp,
        metrics_path=args.telemetry_path,
        enable_lifecycle=args.enable_lifecycle,
        max_requests=args.max_requests,
    )
    wc: webconfig.WebConfig | None = getattr(args, "web_config", None)
    live = None
    if wc is not None:
        live = webguard.install(router, wc)
        exp.web_config_status = lambda: live.status
    tls = live if live is not None and wc is not None and wc.tls is not None else None
    host, port = args.listen
    try:
        server = await http_serve(router, host or None, port, tls=tls)
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", host, port, e.strerror or e)
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGHUP, exp.request_reload)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    exp.loop_lag = LoopLag()
    exp.loop_lag.start()
    # The port bound, not the one asked for: with port 0 the kernel picks it.
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    log.info(
        "dnsfleet-exporter %s listening on %s://%s:%d%s (config: %s, %d targets, event loop: %s)",
        __version__,
        "https" if tls else "http",
        host or "*",
        bound,
        args.telemetry_path,
        exp.config.source,
        len(exp.config.targets),
        getattr(args, "loop", eventloop.running_kind()),
    )
    await stop.wait()
    log.info("shutting down")
    exp.loop_lag.stop()
    server.close()
    await server.wait_closed()
    return 0


# ------------------------------------------------------------------ `dnsfleet` on-call tools


def failover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resolv-conf",
        default="/etc/resolv.conf",
        metavar="FILE",
        help="the resolv.conf to assess (default /etc/resolv.conf)",
    )
    p.add_argument(
        "--libc", choices=LIBCS, default="glibc", help="the client's C library (default glibc)"
    )
    p.add_argument("--query-name", default=".", help="what a client asks (default .)")
    p.add_argument("--query-type", default="NS", help="query type (default NS)")
    p.add_argument(
        "--probe-timeout",
        default="1s",
        help="after this long a nameserver counts as silent (default 1s)",
    )


def _capacitytest() -> ModuleType:
    """capacity/command.py on first use: its dnspython query modules cost the exporter daemon,
    which shares this module, about 3.5 MB of RSS it never uses."""
    import dnsfleet.capacity.command  # noqa: PLC0415

    return dnsfleet.capacity.command


def _query_line(text: str) -> str:
    import dnsfleet.capacity.queries  # noqa: PLC0415 - on first use, as _capacitytest

    return dnsfleet.capacity.queries.query_line(text)


def _zone_arg(text: str) -> str:
    import dnsfleet.capacity.queries  # noqa: PLC0415 - on first use, as _capacitytest

    return dnsfleet.capacity.queries.zone_arg(text)


def _capacity_main(args: argparse.Namespace) -> int:
    return int(_capacitytest().main(args))


def capacity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="resolver address, e.g. 127.0.0.1:53")
    p.add_argument(
        "--query",
        dest="queries",
        action="append",
        type=_query_line,
        default=[],
        metavar="NAME[/TYPE]",
        help="a cache-hit query (repeatable): asked once before the run so it is "
        "cached, then repeated for the whole ramp",
    )
    p.add_argument(
        "--miss-zone",
        type=_zone_arg,
        metavar="ZONE",
        help="a zone you serve that answers every name (a wildcard): the cache-miss "
        "run asks a new name under it with every query. Never a public zone",
    )
    p.add_argument(
        "--miss-type",
        default="A",
        type=str.upper,
        help="query type of the cache-miss names (default A)",
    )
    p.add_argument(
        "--kind",
        choices=("hit", "miss", "both"),
        help="which capacities to measure (default: both when --miss-zone is given, else hit)",
    )
    p.add_argument(
        "--max-qps",
        type=int,
        default=100000,
        help="highest offered load of the ramp (default 100000)",
    )
    p.add_argument("--ramp", type=int, default=60, help="ramp duration in seconds (default 60)")
    p.add_argument(
        "--max-loss", type=float, default=1.0, help="acceptable query loss in percent (default 1)"
    )
    repeat_args(p)
    p.add_argument(
        "--state-file",
        default=DEFAULT_CAPACITY_FILE,
        help=f"where the figures are recorded (default {DEFAULT_CAPACITY_FILE}; "
        "the exporter reads resolver.capacity_file)",
    )
    p.add_argument(
        "--query-dir",
        help="where the generated query files are kept (default: queries/ beside the state file)",
    )
    p.add_argument(
        "--yes",
        action="store_true",
        help="confirm: this loads the resolver to its limit (maintenance window)",
    )


def repeat_args(p: argparse.ArgumentParser) -> None:
    """capacity-test on a busy host: repeats, and the client's share of a core."""
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="resperf runs per kind; the median is recorded with the spread (default 3)",
    )
    p.add_argument(
        "--min-client-cpu",
        type=float,
        default=MIN_CLIENT_CPU_SHARE,
        help="share of a core resperf must get while it sends (it spins: less means the "
        f"host denied it CPU and the run measured the client; default {MIN_CLIENT_CPU_SHARE})",
    )


Subcommand = tuple[
    Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str
]
SUBCOMMANDS: dict[str, Subcommand] = {
    "failover": (
        failover_args,
        failover.run,
        "what clients of a resolv.conf suffer from failing nameservers",
    ),
    "capacity-test": (
        capacity_args,
        _capacity_main,
        "measure a resolver's cache-hit and cache-miss capacity with resperf and record them",
    ),
    "config-schema": (
        lambda p: None,
        config_schema.print_schema,
        "print the JSON Schema of dnsfleet.yml (docs/dnsfleet.schema.json)",
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dnsfleet", description="dnsfleet on-call tools")
    p.add_argument("--version", action="version", version=f"dnsfleet {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (add_args, _, help_text) in SUBCOMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    args = p.parse_args(argv)
    logs.setup(level="warn")
    return SUBCOMMANDS[args.command][1](args)


if __name__ == "__main__":
    sys.exit(exporter_main())
