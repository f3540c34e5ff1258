"""Find the real binaries the tests drive. `make test` installs them; a missing one fails the
test (it would be a missing install step, not a reason to skip)."""

from __future__ import annotations

import os
import random
import socket

import pytest

from tests.harness import needs


def num(value: float | None) -> float:
    """A sample value that must be there: fails the test where it is absent, so comparisons
    (`num(v) < 100`) never pass on a missing series."""
    assert value is not None, "series absent"
    return value


def binary(name: str) -> str:
    """The path of a program the suite needs: it must be listed in tests/needs.txt, and
    `make test` installed it."""
    if name not in needs.programs():
        pytest.fail(f"{name} is not in tests/needs.txt: add it with its Debian package")
    path = needs.find(name)
    if path:
        return path
    pytest.fail(f"{name} is not installed: `make test` installs it (tests/needs.txt)")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed to daemons come from below the kernel's ephemeral range: a port the kernel
# gave out for a bind to port 0 was free when asked, but the kernel could give it again to
# any outgoing query of the suite (a probe, a resolver's upstream query) before the daemon
# bound it ("address already in use"). Below the range only another explicit pick can
# take it, one in thousands.
PORT_RANGE = (10_000, max(10_001, _ephemeral_low()))


def free_port(kind: int = socket.SOCK_DGRAM, host: str = "127.0.0.1") -> int:
    """A port free for both UDP and TCP on ``host``, outside the ephemeral range."""
    for _ in range(200):
        port = random.randrange(*PORT_RANGE)
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u,
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t,
        ):
            try:
                u.bind((host, port))
                t.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port")


def examples(n: int) -> int:
    """A fuzz test's hypothesis ``max_examples``: ``n`` under `make test`; a tenth (at least
    50) in the fast loop, `pytest -m unit`, where conftest.py sets DNSFLEET_FUZZ_FRACTION."""
    fraction = float(os.environ.get("DNSFLEET_FUZZ_FRACTION", "1"))
    return n if fraction >= 1 else max(50, int(n * fraction))
