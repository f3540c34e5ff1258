"""``host``: the host collectors (bonding, NIC interrupts, CPU latency)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dnsfleet.config.reader import Node, _show


@dataclass(frozen=True)
class HostConfig:
    """Host collectors (bonding, NIC interrupts, CPU latency)."""

    collectors: tuple[str, ...] = ("bonding", "nic", "cpu_latency")
    # Process name whose threads' CPUs are compared with the NIC's interrupt CPUs.
    resolver_process: str | None = None
    # Interfaces the nic collector reports (full-match regexes on the interface name).
    nic_include: str = ".*"
    nic_exclude: str = ""


HOST_COLLECTORS = ("bonding", "nic", "cpu_latency")


def _parse_host(node: Node) -> HostConfig:
    f = node.fields()
    d = HostConfig()

    def names(n: Node) -> tuple[str, ...]:
        return tuple(item.choice(HOST_COLLECTORS) for item in n.sequence())

    def regex(n: Node) -> str:
        text = n.string(allow_empty=True)
        try:
            re.compile(text)
        except re.error as e:
            raise n.error(f"invalid regular expression: {e}") from None
        return text

    def process(n: Node) -> str:
        name = n.string()
        # /proc/<pid>/comm holds at most TASK_COMM_LEN - 1 = 15 bytes.
        if len(name.encode()) > 15 or "/" in name:
            raise n.error(f"process name {_show(name)} is longer than the kernel's 15-byte "
                          "comm or contains '/' (use the name `ps -o comm` shows)")
        return name

    host = HostConfig(
        collectors=f.opt("collectors", d.collectors, names),
        resolver_process=f.opt("resolver_process", None, process),
        nic_include=f.opt("nic_include", d.nic_include, regex),
        nic_exclude=f.opt("nic_exclude", d.nic_exclude, regex),
    )
    f.done()
    return host


