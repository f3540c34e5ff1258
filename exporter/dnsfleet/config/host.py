"""``host``: the host collectors (bonding, NIC interrupts, CPU latency, conntrack)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dnsfleet.config.checks import JSON, Check, Choice, ListOf, key, read_section
from dnsfleet.config.concepts import Regex
from dnsfleet.config.reader import Node
from dnsfleet.config.values import quote

HOST_COLLECTORS = ("bonding", "nic", "cpu_latency", "conntrack")


class ProcessName(Check):
    """A process name as /proc/<pid>/comm holds it: at most TASK_COMM_LEN - 1 = 15 bytes
    (include/linux/sched.h)."""

    def read(self, node: Node) -> str:
        name = node.string()
        if len(name.encode()) > 15 or "/" in name:
            raise node.error(
                f"process name {quote(name)} is longer than the kernel's 15-byte "
                "comm or contains '/' (use the name `ps -o comm` shows)"
            )
        return name

    def schema(self) -> JSON:
        return {"type": "string", "minLength": 1, "maxLength": 15, "pattern": "^[^/]+$"}


@dataclass(frozen=True)
class HostConfig:
    """Host collectors (bonding, NIC interrupts, CPU latency, conntrack)."""

    collectors: tuple[str, ...] = field(
        default=HOST_COLLECTORS, metadata=key(ListOf(Choice(HOST_COLLECTORS)))
    )
    resolver_process: str | None = field(
        default=None,
        metadata=key(
            ProcessName(),
            doc="Process name whose threads' CPUs are compared with the NIC's interrupt CPUs",
        ),
    )
    nic_include: str = field(
        default=".*",
        metadata=key(
            Regex(), doc="Interfaces the nic collector reports (full-match regex on the name)"
        ),
    )
    nic_exclude: str = field(
        default="",
        metadata=key(Regex(), doc="Interfaces the nic collector leaves out (full-match regex)"),
    )


def parse_host(node: Node) -> HostConfig:
    return read_section(node, HostConfig)
