"""Shared fixtures: real BIND and unbound on loopback, each in its own temp dir."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.servers import Blackhole, Named, Unbound  # noqa: E402

# example.test: authoritative on BIND; unbound reaches it through a stub-zone.
EXAMPLE_RECORDS = """www     IN A     192.0.2.10
canary  3600 IN A 192.0.2.11
short   3 IN A   192.0.2.12
big     IN TXT   "{txt}"
big     IN TXT   "{txt}2"
big     IN TXT   "{txt}3"
big     IN TXT   "{txt}4"
big     IN TXT   "{txt}5"
big     IN TXT   "{txt}6"
""".format(txt="x" * 250)


@pytest.fixture(scope="session")
def named(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Named]:
    n = Named(tmp_path_factory.mktemp("named"), zones={"example.test": EXAMPLE_RECORDS})
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="session")
def unbound(tmp_path_factory: pytest.TempPathFactory, named: Named) -> Iterator[Unbound]:
    """unbound recursing to BIND for example.test, and to a dead port for dead.test
    (which SERVFAILs)."""
    dead = Blackhole()
    u = Unbound(tmp_path_factory.mktemp("unbound"),
                stubs={"example.test.": f"127.0.0.1@{named.port}",
                       "dead.test.": f"127.0.0.1@{dead.port}"},
                local_data=["a.local.test. 300 IN A 192.0.2.1"],
                # Give up on a dead upstream in well under a second (default: minutes).
                extra_server="  infra-cache-max-rtt: 300\n  max-sent-count: 4\n")
    u.start()
    yield u
    u.stop()
    dead.close()


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    b = Blackhole()
    yield b
    b.close()
