"""The exporter's own metrics: its build, configuration, targets, probe and scrape counts
(``dnsfleet_build_info``, ``dnsfleet_config_*``, ``dnsfleet_web_config_*``, ``dnsfleet_targets``,
``dnsfleet_probes_total``, ``dnsfleet_scrapes_total``, ``dnsfleet_scrape_duration_seconds``,
``dnsfleet_scrape_cycle_end_timestamp_seconds``),
and its process metrics, with the names client_python's ProcessCollector and
PlatformCollector use (process_*, python_info), so standard dashboards work.
(``dnsfleet_collector_*`` come from the collector runner, collectors/base.py.)

Produced here instead of by client_python: importing prometheus_client costs ~1.5 MB of RSS
for six gauges. These describe this process, not the host, so they read the kernel's view
of the running process (``/proc/self``), never through --path.procfs.
"""

from __future__ import annotations

import asyncio
import os
import platform
import resource
from dataclasses import dataclass

from dnsfleet import __version__
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HeldFiles, held_files_cap

SELF = "/proc/self"  # the exporter's own process; host facts go through HostFS
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:  # this process's kernel, for its start time
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


_BOOT = _boot_time()


@dataclass(frozen=True)
class ReloadStatus:
    """The state of a file the exporter reloads (dnsfleet.yml, the web configuration)."""

    successful: bool
    timestamp: float  # of the last successful load
    error: str = ""  # of the latest failed load only
    failed_at: float = 0.0


def exporter_families(
    *,
    reload_successful: bool,
    reload_timestamp: float,
    targets: int,
    probes_total: int,
    scrapes_total: int,
    web_reload: ReloadStatus | None = None,
    probe_concurrency: int | None = None,
    internal_errors: int = 0,
) -> list[Family]:
    """Pure: the exporter's own state after a scrape."""
    web: list[Family] = []
    if web_reload is not None:
        web = [
            Family(
                "dnsfleet_web_config_last_reload_successful",
                "1 if the last load of --web.config.file succeeded (0: the previous TLS and "
                "auth settings are still in force).",
            ).add(float(web_reload.successful)),
            Family(
                "dnsfleet_web_config_last_reload_success_timestamp_seconds",
                "When the web configuration in force was loaded.",
            ).add(web_reload.timestamp),
        ]
    return [
        Family("dnsfleet_build_info", "dnsfleet version, as a label; always 1.").add(
            1, {"version": __version__, "python": platform.python_version()}
        ),
        Family(
            "dnsfleet_config_last_reload_successful", "1 if the last configuration load succeeded."
        ).add(float(reload_successful)),
        Family(
            "dnsfleet_config_last_reload_success_timestamp_seconds",
            "When the running configuration was loaded.",
        ).add(reload_timestamp),
        Family("dnsfleet_targets", "Configured probe targets.").add(targets),
        Family("dnsfleet_probes_total", "Probes sent by this exporter on /metrics.", "counter").add(
            probes_total
        ),
        Family("dnsfleet_scrapes_total", "/metrics scrapes served.", "counter").add(scrapes_total),
        Family(
            "dnsfleet_probe_internal_errors_total",
            "Probes of one target that ended in an exception of the exporter's own (reason "
            "internal; the log has the traceback), on /metrics and /probe.",
            "counter",
        ).add(internal_errors),
        *web,
        *(
            []
            if probe_concurrency is None
            else [
                Family(
                    "dnsfleet_probe_concurrency_limit",
                    "Probes in flight at most, in a /metrics cycle and for /probe each: "
                    "limits.max_concurrent_probes, lowered to fit the open-file limit.",
                ).add(probe_concurrency)
            ]
        ),
    ]


def scrape_duration_family(took: float) -> Family:
    return Family(
        "dnsfleet_scrape_duration_seconds", "Time this exporter spent on the current scrape."
    ).add(took)


# /metrics cycles of different budgets that may run at once (app.MAX_CYCLES_IN_FLIGHT).
CONCURRENT_CYCLES = 3

# Descriptors kept for everything but probe sockets: the HTTP server's connections
# (--web.max-requests scrapes, /probe clients, keep-alive), collectors' files, statistics
# clients (unbound-control, BIND and PowerDNS over HTTP, Consul).
FD_HEADROOM = 128


def descriptor_budget() -> tuple[int, int]:
    """(soft RLIMIT_NOFILE, descriptors open now) of this process; the limit is 2**31 for
    unlimited, the count 0 where /proc is not mounted."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 2**31
    try:
        in_use = open_fds()
    except OSError:
        in_use = 0
    return soft, in_use


def open_fds() -> int:
    """Descriptors open in this process. Linux 6.2 and later give the count as the size of
    /proc/self/fd (fs/proc/fd.c, proc_fd_getattr); listing it cost 2 ms a scrape once the
    host collectors held ~2,000 files open. Older kernels say 0: the entries are counted
    (that count includes the listing's own descriptor)."""
    return os.stat(f"{SELF}/fd").st_size or len(os.listdir(f"{SELF}/fd"))


def probe_concurrency(configured: int, soft_limit: int, in_use: int) -> int:
    """Pure: how many probes may be in flight at once, each holding a socket. The
    configured ``limits.max_concurrent_probes``, lowered so that CONCURRENT_CYCLES /metrics
    cycles of different budgets and /probe requests (each capped at this) fit in the
    open-file limit beside what is open already and FD_HEADROOM: with ``ulimit -n 256``
    and 1,024, 755 of 1,000 healthy targets failed with EMFILE as network_error."""
    # Host collectors keep up to held_files_cap descriptors open between scrapes.
    spare = soft_limit - in_use - FD_HEADROOM - held_files_cap(soft_limit)
    return max(1, min(configured, spare // (CONCURRENT_CYCLES + 1)))


def share_descriptors(cap: int, *, probes: int, zones: int) -> tuple[int, int]:
    """Pure: one cycle's socket cap (see :func:`probe_concurrency`) split between the probes
    (``probes`` targets, a socket each at a time) and the zone checks (``zones``
    nameservers, likewise): (probes in flight, zone sockets). Both get what they need when
    it fits, else the cap in proportion to the need, at least one each. Zone sockets
    outside the budget once let 600 silent zones under ``ulimit -n 512`` take every
    descriptor: a healthy nameserver read as down with EMFILE."""
    if zones <= 0:
        return cap, 0
    if probes + zones <= cap:
        return cap - zones, zones
    share = max(1, min(zones, cap * zones // max(1, probes + zones)))
    return max(1, cap - share), share


def cycle_end_family(wall: float) -> Family:
    return Family(
        "dnsfleet_scrape_cycle_end_timestamp_seconds",
        "When the probe-and-collect cycle these results come from ended (Unix time). Older "
        "than the scrape when a request that could not wait for the cycle in flight was "
        "answered with the last complete one.",
    ).add(wall)


# What stays put for the life of a process: its start (``starttime`` in /proc/self/stat)
# and the interpreter; and /proc/self/statm held open and read again at offset 0 (a
# single_open seq_file). Keyed by PID: a forked child's /proc/self is its own.
_START: dict[int, float | None] = {}
_STATM: dict[int, HeldFiles] = {}
_STATM_PATHS = [f"{SELF}/statm"]
_PYTHON = {
    "implementation": platform.python_implementation(),
    "major": platform.python_version_tuple()[0],
    "minor": platform.python_version_tuple()[1],
    "patchlevel": platform.python_version_tuple()[2],
    "version": platform.python_version(),
}


def _start_time() -> float | None:
    pid = os.getpid()
    if pid not in _START:
        with open(f"{SELF}/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        _START[pid] = None if _BOOT is None else _BOOT + start_ticks / TICKS
    return _START[pid]


def _statm() -> bytes | None:
    pid = os.getpid()
    held = _STATM.get(pid)
    if held is None:
        for old in _STATM.values():
            old.close()
        _STATM.clear()
        held = _STATM[pid] = HeldFiles()
    return held.read(_STATM_PATHS)[0]


def process_families() -> list[Family]:
    fams: list[Family] = []
    t = os.times()
    fams.append(
        Family(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
        ).add(t.user + t.system)
    )
    try:
        statm = _statm()
        if statm is None:
            raise OSError("no /proc/self/statm")
        vm_pages, rss_pages = (int(x) for x in statm.split()[:2])
        fams.append(
            Family("process_virtual_memory_bytes", "Virtual memory size in bytes.").add(
                vm_pages * PAGE
            )
        )
        fams.append(
            Family("process_resident_memory_bytes", "Resident memory size in bytes.").add(
                rss_pages * PAGE
            )
        )
        if (start := _start_time()) is not None:
            fams.append(
                Family(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                ).add(start)
            )
        fams.append(Family("process_open_fds", "Number of open file descriptors.").add(open_fds()))
    except (OSError, ValueError, IndexError):
        pass  # not Linux, or /proc not mounted: CPU and limits only
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fams.append(
        Family("process_max_fds", "Maximum number of open file descriptors.").add(
            soft if soft != resource.RLIM_INFINITY else float("inf")
        )
    )
    fams.append(Family("python_info", "Python platform information").add(1, _PYTHON))
    return fams


# The lag probe: a sleep of LAG_TICK, again and again; the gauge is the largest lateness
# seen in the last LAG_WINDOW seconds.
LAG_TICK = 0.1
LAG_WINDOW = 16


class LoopLag:
    """How late the event loop serves what is due: a task sleeps LAG_TICK over and over and
    notes how much later than asked it woke. A probe socket that keeps the loop busy, a
    CPU-bound render or a blocking call all show here before /-/healthy times out. The
    figure is the largest lag of the last LAG_WINDOW seconds, kept as per-second maxima in
    a ring: every scraper sees the same value whatever its interval, and a stall between
    two scrapes is not missed (it is reported when the loop runs again)."""

    __slots__ = ("_max", "_second", "_task")

    def __init__(self) -> None:
        self._second = [-1] * LAG_WINDOW
        self._max = [0.0] * LAG_WINDOW
        self._task: asyncio.Task[None] | None = None

    def observe(self, now: float, lag: float) -> None:
        sec = int(now)
        i = sec % LAG_WINDOW
        if self._second[i] != sec:
            self._second[i], self._max[i] = sec, 0.0
        self._max[i] = max(self._max[i], lag)

    def current(self, now: float) -> float:
        sec = int(now)
        return max(
            (m for s, m in zip(self._second, self._max, strict=True) if sec - s < LAG_WINDOW),
            default=0.0,
        )

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + LAG_TICK
            await asyncio.sleep(LAG_TICK)
            now = loop.time()
            self.observe(now, max(0.0, now - asked))

    def family(self) -> Family:
        return Family(
            "dnsfleet_event_loop_lag_seconds",
            f"Largest lateness of the event loop over the last {LAG_WINDOW} s: how much "
            f"later than due a {LAG_TICK:g} s sleep woke.",
        ).add(self.current(asyncio.get_running_loop().time()))
