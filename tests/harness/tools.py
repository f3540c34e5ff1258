"""Find the real binaries the tests drive. `make test` installs them; a missing one fails the
test (it would be a missing install step, not a reason to skip)."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

SEARCH = ("/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin")


def num(value: float | None) -> float:
    """A sample value that must be there: fails the test where it is absent, so comparisons
    (`num(v) < 100`) never pass on a missing series."""
    assert value is not None, "series absent"
    return value


def binary(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    for d in SEARCH:
        cand = os.path.join(d, name)
        if os.access(cand, os.X_OK):
            return cand
    pytest.fail(f"{name} is not installed: `make test` installs it (see Makefile TEST_DEBS)")


def free_port(kind: int = socket.SOCK_DGRAM, host: str = "127.0.0.1") -> int:
    """A port free for both UDP and TCP on ``host``."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind((host, 0))
            port = int(u.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
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
