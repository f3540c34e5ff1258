"""Netfilter connection tracking: failed inserts, drops and table fill of the node.

Conntrack sits under every UDP DNS query of a Kubernetes node (kube-proxy's NAT to the
cluster DNS VIP). A lost insert race drops the query silently, and the client waits its
full resolv.conf timeout (the classic 5 s lookups); a full table drops new flows. Read from
/proc/net/stat/nf_conntrack (per CPU, summed) and /proc/sys/net/netfilter/nf_conntrack_count
and nf_conntrack_max, all of the exporter's network namespace (the node's, with
hostNetwork). Without nf_conntrack loaded the files are absent: no families, no failure.
Emits every ``dnsfleet_conntrack_*`` family (collector label ``conntrack``).
"""

from __future__ import annotations

from dnsfleet.collectors.base import CollectorError, host_collector
from dnsfleet.collectors.treeheld import TreeHeld
from dnsfleet.config import Config
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.conntrack import ConntrackStat, parse_conntrack_stat, parse_sysctl_count

STAT = ("net", "stat", "nf_conntrack")
COUNT = ("sys", "net", "netfilter", "nf_conntrack_count")
MAX = ("sys", "net", "netfilter", "nf_conntrack_max")


def _counter(name: str, help_: str, value: int | None) -> list[Family]:
    return [] if value is None else [Family(name, help_, "counter").add(value)]


def families(stat: ConntrackStat | None, count: int | None, limit: int | None) -> list[Family]:
    fams: list[Family] = []
    if stat is not None:
        fams += _counter(
            "dnsfleet_conntrack_insert_failed_total",
            "Connections conntrack could not insert, summed over CPUs: the race that "
            "drops a UDP DNS query sent at once with its twin (A and AAAA).",
            stat.insert_failed,
        )
        fams += _counter(
            "dnsfleet_conntrack_drops_total",
            "Packets dropped because the conntrack table was full, summed over CPUs.",
            stat.drop,
        )
        fams += _counter(
            "dnsfleet_conntrack_early_drops_total",
            "Connections evicted early to make room in a full conntrack table, summed over CPUs.",
            stat.early_drop,
        )
        if count is None:
            count = stat.entries
    if count is not None:
        fams.append(
            Family("dnsfleet_conntrack_entries", "Connections in the conntrack table.").add(count)
        )
    if limit is not None:
        fams.append(
            Family(
                "dnsfleet_conntrack_entries_limit",
                "Size limit of the conntrack table (nf_conntrack_max).",
            ).add(limit)
        )
    return fams


# The three files of the host tree read last, held open and read again at offset 0
# (hostfs.HeldFiles): the statistics are a seq_file (a pread at 0 starts it again, as for
# /proc/irq) and the two sysctls are read by proc_sys_read at the offset given. With
# nf_conntrack unloaded the held reads fail (the entries' removal: EIO, ENOENT) and the
# paths, opened afresh, are missing; loaded again, they are found. An open, a read and a
# close of each were most of the collector. The statistics have a ~150-byte line per CPU:
# STAT_READ holds them for a few hundred CPUs (more are read afresh each scrape).
STAT_READ = 64 * 1024
_HELD = TreeHeld(size=STAT_READ)


def _read(fs: HostFS) -> list[bytes | None]:
    return _HELD.read(fs, lambda: [str(fs.proc(*STAT)), str(fs.proc(*COUNT)), str(fs.proc(*MAX))])


def collect(fs: HostFS, config: Config) -> list[Family]:
    del config
    try:
        stat_raw, count_raw, max_raw = (
            None if b is None else b.decode("utf-8", errors="replace") for b in _read(fs)
        )
        stat = None if stat_raw is None else parse_conntrack_stat(stat_raw)
        count = None if count_raw is None else parse_sysctl_count(count_raw, COUNT[-1])
        limit = None if max_raw is None else parse_sysctl_count(max_raw, MAX[-1])
    except (HostReadError, ValueError) as e:
        raise CollectorError(str(e)) from e
    return families(stat, count, limit)


COLLECTOR = host_collector("conntrack", collect)
