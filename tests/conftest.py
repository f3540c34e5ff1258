"""Shared fixtures: real BIND and unbound on loopback, each in its own temp dir."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Where the environment turns bytecode caching off (PYTHONDONTWRITEBYTECODE, as on this
# project's CI machines), every run compiled and assertion-rewrote each of the ~150 modules
# a test run imports again: a third of the fast loop. They are cached under .pytest_cache
# instead, never beside the sources (sys.pycache_prefix; pytest's rewriter honours it).
if sys.dont_write_bytecode and not os.environ.get("DNSFLEET_NO_PYCACHE"):
    sys.pycache_prefix = str(ROOT / ".pytest_cache" / "pycache")
    sys.dont_write_bytecode = False

from hypothesis import HealthCheck, settings  # noqa: E402

from tests.harness import needs  # noqa: E402

# Hypothesis' per-example deadline (200 ms) and its too_slow health check are timing
# thresholds: on a shared 2-core machine running three workers they failed tests whose
# subject is bytes, not time. Every property test runs without them.
settings.register_profile("dnsfleet", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dnsfleet")
from tests.harness.servers import Blackhole, Named, Unbound  # noqa: E402

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


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_sendto = socket.socket.sendto
VIOLATIONS: list[str] = []


def _loopback(address: object) -> bool:
    if isinstance(address, str | bytes):  # unix socket path
        return True
    if not isinstance(address, tuple) or not address:
        return True
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        ip = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return False
    # Python 3.11 does not call ::ffff:127.0.0.1 loopback; the kernel sends it as 127.0.0.1.
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _guarded(real: Any, address_index: int) -> Any:
    def method(self: socket.socket, *args: Any) -> Any:
        address = args[address_index]
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            VIOLATIONS.append(f"{real.__name__} to {address!r}")
            raise OSError(errno.ENETUNREACH, f"test guard: {address!r} is not loopback")
        return real(self, *args)

    return method


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests send traffic to loopback only (network namespaces are driven from
    subprocesses). A connect or sendto anywhere else in this process is refused and fails
    the test: e.g. a stub collector reading this machine's /etc/resolv.conf."""
    VIOLATIONS.clear()
    monkeypatch.setattr(socket.socket, "connect", _guarded(_real_connect, 0))
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_real_connect_ex, 0))
    monkeypatch.setattr(socket.socket, "sendto", _guarded(_real_sendto, -1))
    yield
    assert not VIOLATIONS, f"non-loopback traffic attempted: {VIOLATIONS}"


def _undeclared_program(event: str, args: tuple[Any, ...]) -> None:
    """Every process a test starts from a system directory is listed in tests/needs.txt
    (which `make test` installs and checks): otherwise the test depends on what happened to
    be on the machine. Refused where it starts, naming the program. (A program a child
    starts, behind `env` or `sh -c`, is not seen here.) With DNSFLEET_NEEDS_RECORD=FILE the
    programs are written to FILE instead, to draw the list up."""
    if event != "subprocess.Popen":
        return
    executable, argv = args[0], args[1]
    first = executable or (argv if isinstance(argv, str | bytes | os.PathLike) else argv[0])
    program = os.fsdecode(first)
    path = program if "/" in program else needs.find(program)
    if path is None or os.path.dirname(path) not in needs.SYSTEM_DIRS:
        return
    name = os.path.basename(path)
    if record := os.environ.get("DNSFLEET_NEEDS_RECORD"):
        with open(record, "a") as f:
            f.write(f"{name} {path}\n")
    elif name not in needs.programs():
        raise RuntimeError(f"{path} is not in tests/needs.txt: add it with its Debian package")


sys.addaudithook(_undeclared_program)


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
    u = Unbound(
        tmp_path_factory.mktemp("unbound"),
        stubs={"example.test.": f"127.0.0.1@{named.port}", "dead.test.": f"127.0.0.1@{dead.port}"},
        local_data=["a.local.test. 300 IN A 192.0.2.1"],
        # Give up on a dead upstream in well under a second (default: minutes). A server
        # that timed out once is still asked (infra-keep-probing): on a loaded machine one
        # late reply from BIND must not turn example.test into SERVFAIL for every later
        # test of the session, as it did for four tests in a row.
        extra_server=(
            "  infra-cache-max-rtt: 300\n  max-sent-count: 4\n  infra-keep-probing: yes\n"
        ),
    )
    u.start()
    yield u
    u.stop()
    dead.close()


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    b = Blackhole()
    yield b
    b.close()


KINDS = ("unit", "integration")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The fast loop runs in two processes where there are two CPUs (pytest-xdist, as
    `make test` does); `-n 0` (or `-p no:xdist`) keeps it in one."""
    opt = config.option
    if (
        opt.markexpr.strip() == "unit"
        and getattr(opt, "numprocesses", "absent") is None
        and not os.environ.get("PYTEST_XDIST_WORKER")
        and len(os.sched_getaffinity(0)) >= 2
    ):
        opt.numprocesses = 2


def pytest_configure(config: pytest.Config) -> None:
    """The fast loop, `pytest -m unit`, runs a tenth of each fuzz test's cases
    (harness.tools.examples); `make test` runs them all."""
    if config.option.markexpr.strip() == "unit":
        os.environ.setdefault("DNSFLEET_FUZZ_FRACTION", "0.1")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`pytest -m unit` does not import a test module without a unit test: importing the
    integration modules (and the libraries they drive) was most of its time."""
    name = collection_path.name
    if config.option.markexpr.strip() != "unit" or not name.startswith("test_"):
        return None
    if name.endswith(".py") and "mark.unit" not in collection_path.read_text():
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test is exactly one of unit or integration (its own mark, or its module's
    `pytestmark` when it has none of its own), so
    `pytest -m unit` and `-m integration` together run everything, once."""
    wrong = [
        f"{item.nodeid}: {kinds or 'no kind'}"
        for item in items
        if len(kinds := [k for k in KINDS if item.get_closest_marker(k)]) != 1
    ]
    if wrong:
        raise pytest.UsageError(
            "tests must be marked unit or integration (a module without `pytestmark` marks "
            "each test: @pytest.mark.unit if it starts no process, daemon, socket or "
            "namespace, else @pytest.mark.integration):\n  " + "\n  ".join(wrong[:20])
        )
