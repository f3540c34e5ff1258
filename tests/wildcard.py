"""One unbound behind thousands of loopback targets (tests and benchmarks at scale)."""

from __future__ import annotations

from pathlib import Path

from tests.harness.servers import Unbound


class WildcardUnbound(Unbound):
    """unbound on 0.0.0.0 with interface-automatic: it answers on every 127.x.y.z from the
    address asked (IP_PKTINFO), so one server stands behind thousands of targets on its
    port. access-control stays at unbound's default: localhost only."""

    def write_config(self) -> Path:
        p = super().write_config()
        p.write_text(
            p.read_text().replace(
                f"interface: {self.host}\n",
                "interface: 0.0.0.0\n  interface-automatic: yes\n  so-rcvbuf: 4m\n"
                "  so-sndbuf: 4m\n  num-queries-per-thread: 4096\n",
                1,
            )
        )
        return p


def answering_and_silent(
    n: int, *, silent_every: int, port: int, silent_port: int
) -> list[tuple[str, bool]]:
    """``n`` distinct targets: (address, silent?). Every ``silent_every``-th is on
    127.1.x.y at ``silent_port``, the rest on 127.0.x.y at ``port``."""
    out = []
    for i in range(n):
        a, b = divmod(i, 250)
        if silent_every and i % silent_every == silent_every - 1:
            out.append((f"127.1.{a}.{b + 1}:{silent_port}", True))
        else:
            out.append((f"127.0.{a + 1}.{b + 1}:{port}", False))
    return out
