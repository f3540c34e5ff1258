"""/proc/net/stat/nf_conntrack and the nf_conntrack_count / nf_conntrack_max sysctls.

Layout (kernel ``net/netfilter/nf_conntrack_standalone.c`` -> ``ct_cpu_seq_show()``): a
header line naming the columns, then one line per possible CPU of ``%08x`` fields. The
columns differ between kernels, so they are found by name, never by position:

- up to 4.x: ``entries searched found new invalid ignore delete delete_list insert
  insert_failed drop early_drop icmp_error expect_new expect_create expect_delete``
  (a space before each newline), ``search_restart`` appended in 4.10;
- 5.x and later: ``searched`` became ``clashres``, ``delete_list`` became ``chainlength``.

``entries`` is the namespace's table size repeated on every CPU line, not a per-CPU figure.
The other columns are per-CPU ``unsigned int`` counters: each wraps at 2**32 on its own,
which a sum passes on to Prometheus as an ordinary counter reset.
"""

from __future__ import annotations

from dataclasses import dataclass

# The per-CPU counters dnsfleet sums: a failed insert is the race that loses a UDP DNS
# query sent in parallel with its twin (A and AAAA from one socket); drop and early_drop
# are a full table refusing or evicting a flow.
SUMMED = ("insert_failed", "drop", "early_drop")


@dataclass(frozen=True, slots=True)
class ConntrackStat:
    cpus: int  # CPU lines in the file
    entries: int | None  # the table's size when read; None if the kernel has no column
    insert_failed: int | None  # summed over CPUs; None if the kernel has no such column
    drop: int | None
    early_drop: int | None


def parse_conntrack_stat(text: str) -> ConntrackStat:
    rows = [line.split() for line in text.splitlines() if line.strip()]
    if not rows:
        raise ValueError("nf_conntrack: empty file")
    header = rows[0]
    if "entries" not in header:
        raise ValueError(f"nf_conntrack: header {' '.join(header[:4])!r}... names no 'entries'")
    if len(set(header)) != len(header):
        raise ValueError("nf_conntrack: a column is named twice in the header")
    sums = dict.fromkeys(header, 0)
    entries: int | None = None
    for n, fields in enumerate(rows[1:], start=2):
        if len(fields) != len(header):
            raise ValueError(
                f"nf_conntrack: line {n} has {len(fields)} fields, the header {len(header)}"
            )
        try:
            values = [int(f, 16) for f in fields]
        except ValueError:
            raise ValueError(f"nf_conntrack: line {n} has a field that is not hex") from None
        for name, v in zip(header, values, strict=True):
            sums[name] += v
        entries = values[header.index("entries")]
    cpus = len(rows) - 1
    if cpus == 0:
        raise ValueError("nf_conntrack: no CPU line after the header")
    return ConntrackStat(
        cpus=cpus,
        entries=entries,
        insert_failed=sums.get("insert_failed"),
        drop=sums.get("drop"),
        early_drop=sums.get("early_drop"),
    )


def parse_sysctl_count(text: str, what: str) -> int:
    """A /proc/sys integer (nf_conntrack_count, nf_conntrack_max): one decimal number."""
    value = text.strip()
    if not value.isdigit():
        raise ValueError(f"{what}: {value[:20]!r} is not a count")
    return int(value)
