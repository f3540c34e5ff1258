"""The exporter's own metrics: its build, configuration, targets, probe and scrape counts
(``dnsfleet_build_info``, ``dnsfleet_config_*``, ``dnsfleet_targets``,
``dnsfleet_probes_total``, ``dnsfleet_scrapes_total``, ``dnsfleet_scrape_duration_seconds``),
and its process metrics, with the names client_python's ProcessCollector and
PlatformCollector use (process_*, python_info), so standard dashboards work.
(``dnsfleet_collector_*`` come from the collector runner, collectors/base.py.)

Produced here instead of by client_python: importing prometheus_client costs ~1.5 MB of RSS
for six gauges. These describe this process, not the host, so they read the kernel's view
of the running process (``/proc/self``), never through --path.procfs.
"""

from __future__ import annotations

import os
import platform
import resource

from dnsfleet import __version__
from dnsfleet.exposition import Family

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


def exporter_families(
    *,
    reload_successful: bool,
    reload_timestamp: float,
    targets: int,
    probes_total: int,
    scrapes_total: int,
) -> list[Family]:
    """Pure: the exporter's own state after a scrape."""
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
    ]


def scrape_duration_family(took: float) -> Family:
    return Family(
        "dnsfleet_scrape_duration_seconds", "Time this exporter spent on the current scrape."
    ).add(took)


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
        with open(f"{SELF}/statm", "rb") as f:
            vm_pages, rss_pages = (int(x) for x in f.read().split()[:2])
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
        with open(f"{SELF}/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        if _BOOT is not None:
            fams.append(
                Family(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                ).add(_BOOT + start_ticks / TICKS)
            )
        fams.append(
            Family("process_open_fds", "Number of open file descriptors.").add(
                len(os.listdir(f"{SELF}/fd"))
            )
        )
    except (OSError, ValueError, IndexError):
        pass  # not Linux, or /proc not mounted: CPU and limits only
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fams.append(
        Family("process_max_fds", "Maximum number of open file descriptors.").add(
            soft if soft != resource.RLIM_INFINITY else float("inf")
        )
    )
    major, minor, patch = platform.python_version_tuple()
    fams.append(
        Family("python_info", "Python platform information").add(
            1,
            {
                "implementation": platform.python_implementation(),
                "major": major,
                "minor": minor,
                "patchlevel": patch,
                "version": platform.python_version(),
            },
        )
    )
    return fams
