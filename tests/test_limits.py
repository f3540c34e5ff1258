"""Limits: concurrent probes, targets, the per-scrape deadline, 10,000 targets with a fifth
silent, no descriptor or memory growth over 1,000 scrapes, and reloads that keep the old
configuration when the new one is broken. Real sockets and servers on loopback."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet import config as config_mod
from dnsfleet.app import Exporter
from dnsfleet.cli import raise_fd_limit
from dnsfleet.config import ConfigError
from dnsfleet.hostfs import HostFS
from dnsfleet.probes import Reason
from tests.harness.exporter import EXPORTER, ExporterProcess, running_exporter
from tests.harness.process import HttpOk, ManagedProcess
from tests.harness.servers import Blackhole, Unbound, answer, scripted
from tests.harness.tools import free_port
from tests.test_config_bounds import EARLY
from tests.wildcard import WildcardUnbound, answering_and_silent

A_MODULE = {"query_name": "a.local.test.", "query_type": "A"}


def write_config(path: Path, doc: dict[str, Any]) -> Path:
    # resolv_conf: [] — the stub collector must never probe this machine's own resolver.
    path.write_text(yaml.safe_dump({"resolv_conf": [], **doc}))
    return path


def exporter_for(tmp: Path, doc: dict[str, Any]) -> Exporter:
    return Exporter(fs=HostFS(), config_file=str(write_config(tmp / "dnsfleet.yml", doc)))


def fds() -> int:
    return len(HostFS().listdir(HostFS().proc("self", "fd")))


def unheld_fds() -> int:
    """Descriptors but the host files the collectors hold open (hostfs.HeldFiles: a
    /proc/<pid>/comm per process on the host, sysfs attributes), whose number follows the
    host's processes, not the exporter's probes."""
    fd_dir = HostFS().proc("self", "fd")
    targets = []
    for name in HostFS().listdir(fd_dir):
        try:
            targets.append(os.readlink(fd_dir / name))
        except FileNotFoundError:  # the listing's own descriptor, closed since
            continue
    return sum(not t.startswith(("/proc/", "/sys/")) for t in targets)


# ------------------------------------------------------------------------ concurrency


class DelayedPeer:
    """Answers every UDP query after ``delay``, tracking how many are outstanding."""

    def __init__(self, delay: float) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.delay = delay
        self.lock = threading.Lock()
        self.outstanding = 0
        self.max_outstanding = 0
        self.received = 0
        self.stop = threading.Event()
        self.timers: list[threading.Timer] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                continue
            with self.lock:
                self.received += 1
                self.outstanding += 1
                self.max_outstanding = max(self.max_outstanding, self.outstanding)
            t = threading.Timer(self.delay, self.reply, args=(data, peer))
            self.timers.append(t)
            t.start()

    def reply(self, data: bytes, peer: tuple[str, int]) -> None:
        # Decrement before sending: the prober can start the next probe only after it has
        # read this answer, so ``outstanding`` never undercounts.
        with self.lock:
            self.outstanding -= 1
        self.sock.sendto(answer(data, "a.local.test. 60 IN A 192.0.2.1"), peer)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        for t in self.timers:
            t.join()
        self.sock.close()


@pytest.mark.integration
def test_max_concurrent_probes_is_honoured(tmp_path: Path) -> None:
    peer = DelayedPeer(0.05)
    try:
        # 24 targets on one peer, distinct by module.
        targets = [{"address": f"127.0.0.1:{peer.port}", "module": f"m{i}"} for i in range(24)]
        exp = exporter_for(
            tmp_path,
            {
                "modules": {f"m{i}": A_MODULE for i in range(24)},
                "targets": targets,
                "limits": {"max_concurrent_probes": 4},
            },
        )
        asyncio.run(exp.scrape(10.0))
    finally:
        peer.close()
    assert peer.received == 24
    assert peer.max_outstanding == 4
    assert all(st.last is not None and st.last.success for st in exp.prober.states.values())


@pytest.mark.integration
def test_probe_concurrency_fits_the_open_file_limit(
    tmp_path: Path, wildcard_unbound: Unbound
) -> None:
    """N5: with `ulimit -n 256` and limits.max_concurrent_probes at its 1,024, 755 of 1,000
    healthy targets were reported as network_error (EMFILE). The exporter sizes probe
    concurrency to the open-file limit (after raising the soft limit to the hard one) and
    says so in dnsfleet_probe_concurrency_limit."""
    targets = [
        {"address": a, "module": "a"}
        for a, _ in answering_and_silent(
            1000, silent_every=0, port=wildcard_unbound.port, silent_port=0
        )
    ]
    conf = write_config(
        tmp_path / "dnsfleet.yml",
        {"modules": {"a": {**A_MODULE, "timeout": "5s"}}, "targets": targets},
    )
    port = free_port()
    managed = ManagedProcess(
        [
            "bash",
            "-c",
            'ulimit -n 256 && exec "$@"',  # soft and hard: nothing to raise
            "exporter",
            *EXPORTER,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--config.file={conf}",
        ],
        tmp_path / "exporter.log",
        what="exporter",
    )
    try:
        managed.wait_until(HttpOk(f"http://127.0.0.1:{port}/-/healthy"), timeout=30)
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics",
            headers={"X-Prometheus-Scrape-Timeout-Seconds": "30"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
    finally:
        managed.stop(timeout=10)
    success = [ln for ln in text.splitlines() if ln.startswith("dnsfleet_probe_success{")]
    failed = [ln for ln in success if ln.endswith(" 0")]
    assert len(success) == 1000
    assert failed == [], f"{len(failed)} failed, e.g. {failed[:3]}"
    limit = metric(text, "dnsfleet_probe_concurrency_limit")
    assert 1 <= limit <= (256 - 128) / 2, limit
    assert "allows" in managed.output() and "raise it" in managed.output()


@pytest.mark.unit
def test_max_targets(tmp_path: Path) -> None:
    doc = {
        "modules": {"m": A_MODULE},
        "targets": [{"address": f"127.0.0.{i}", "module": "m"} for i in range(1, 6)],
        "limits": {"max_targets": 4},
    }
    with pytest.raises(ConfigError) as e:
        config_mod.load(write_config(tmp_path / "c.yml", doc))
    assert str(e.value).endswith("targets: 5 targets exceed limits.max_targets (4)")


@pytest.mark.integration
def test_scrape_deadline_budgets_every_probe(tmp_path: Path, blackhole: Blackhole) -> None:
    """Six silent targets with a 5 s module timeout, two at a time, a 1.5 s scrape timeout
    (offset 0.5 s): the first two wait out the 1 s budget, the other four are not started
    after the deadline. Nobody waits 5 s."""
    exp = exporter_for(
        tmp_path,
        {
            "modules": {f"m{i}": {**A_MODULE, "timeout": "5s"} for i in range(6)},
            "targets": [{"address": blackhole.address, "module": f"m{i}"} for i in range(6)],
            "limits": {"max_concurrent_probes": 2},
        },
    )
    asyncio.run(exp.scrape(1.5))
    results = [st.last for st in exp.prober.states.values()]
    assert all(r is not None and r.reason is Reason.TIMEOUT for r in results)
    details = sorted(r.detail for r in results if r is not None)
    assert details.count("scrape deadline reached before the probe could start") == 4
    waited = [r for r in results if r is not None and r.detail.startswith("no answer within")]
    assert len(waited) == 2
    assert all(r.duration < 5.0 for r in waited)  # cut by the budget, not the module timeout


# ------------------------------------------------------------------------ 10,000 targets


@pytest.fixture
def wildcard_unbound(tmp_path: Path) -> Iterator[Unbound]:
    u = WildcardUnbound(tmp_path / "unbound", local_data=["a.local.test. 300 IN A 192.0.2.1"])
    u.start()
    yield u
    u.stop()


@pytest.mark.integration
def test_ten_thousand_targets_a_fifth_silent(tmp_path: Path, wildcard_unbound: Unbound) -> None:
    """10,000 targets, a fifth silent, in one scrape: every answering target answered,
    every silent one got its full timeout (none starved by the deadline), and the scrape
    ended within Prometheus' timeout.

    How long the 8,000 answers take depends on the machine: unbound and the exporter share
    two cores with whatever else runs. So the answering targets' timeout is derived from
    what the machine delivers now (three times the slowest answer of a calibration scrape
    of them alone), not assumed: with a fixed 1 s it failed on a busy machine (7,695 of
    8,000 within the budget)."""
    raise_fd_limit()
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # reads nothing, answers nothing
    silent.bind(("0.0.0.0", 0))
    silent_port = silent.getsockname()[1]
    pairs = answering_and_silent(
        10_000, silent_every=5, port=wildcard_unbound.port, silent_port=silent_port
    )
    try:
        (tmp_path / "calibration").mkdir()
        calibration = exporter_for(
            tmp_path / "calibration",
            {
                "modules": {"a": {**A_MODULE, "timeout": "20s"}},
                "targets": [{"address": a, "module": "a"} for a, quiet in pairs if not quiet],
            },
        )
        asyncio.run(calibration.scrape(30.0))
        answered = [st.last for st in calibration.prober.states.values()]
        assert all(r is not None and r.success for r in answered), "unbound did not answer"
        slowest = max(r.duration for r in answered if r is not None)
        answer_timeout = max(1.0, 3 * slowest)
        scrape_timeout = 10.0 + answer_timeout
        exp = exporter_for(
            tmp_path,
            {
                "modules": {
                    "a": {**A_MODULE, "timeout": f"{answer_timeout}s"},
                    "s": {**A_MODULE, "timeout": "1s"},
                },
                "targets": [{"address": a, "module": "s" if quiet else "a"} for a, quiet in pairs],
            },
        )
        text = asyncio.run(exp.scrape(scrape_timeout)).decode()
    finally:
        silent.close()
    results = {st.target.address: st.last for st in exp.prober.states.values()}
    assert len(results) == 10_000
    ok = [a for a, r in results.items() if r is not None and r.success]
    timed_out = [
        a
        for a, r in results.items()
        if r is not None and r.reason is Reason.TIMEOUT and r.detail == "no answer within 1s"
    ]
    assert len(ok) == 8_000 and all(a.startswith("127.0.") for a in ok), (
        f"{len(ok)} of 8,000 answered (answer timeout {answer_timeout:.2f} s)"
    )
    # Every silent target got its full module timeout: none was starved by the deadline.
    assert len(timed_out) == 2_000 and all(a.startswith("127.1.") for a in timed_out)
    duration = float(text.split("\ndnsfleet_scrape_duration_seconds ", 1)[1].split()[0])
    # The contract with Prometheus, not a speed target: the exporter budgets every probe
    # against this timeout, so the whole scrape must fit in it.
    assert duration < scrape_timeout, duration


# ------------------------------------------------------------------------ soak


SOAK_CHILD = "DNSFLEET_SOAK_IN_OWN_PROCESS"


@pytest.mark.integration
def test_no_descriptor_or_memory_growth_over_1000_scrapes(tmp_path: Path) -> None:
    """Measured in a pytest process of its own: in a worker shared with other tests it
    grew by the same 1.97 MB in three-process runs only (threads or state earlier tests
    leave behind allocate while it measures), and passed alone every time."""
    if os.environ.get(SOAK_CHILD) == "1":
        _soak(tmp_path)
        return
    node = f"{Path(__file__).resolve()}::test_no_descriptor_or_memory_growth_over_1000_scrapes"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", node],
        env={**os.environ, SOAK_CHILD: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]


def _soak(tmp_path: Path) -> None:
    closed = free_port()
    with (
        scripted(lambda q: [answer(q, "a.local.test. 60 IN A 192.0.2.1")]) as good,
        scripted(lambda q: [os.urandom(64)]) as junk,
    ):
        hole = Blackhole()
        try:
            mods = {
                "udp": {**A_MODULE, "timeout": "20ms"},
                "tcp": {**A_MODULE, "timeout": "20ms", "transport": "tcp"},
            }
            exp = exporter_for(
                tmp_path,
                {
                    "modules": mods,
                    "targets": [
                        {"address": good.address, "module": "udp"},
                        {"address": good.address, "module": "tcp"},
                        {"address": junk.address, "module": "udp"},
                        {"address": hole.address, "module": "udp"},
                        {"address": hole.address, "module": "tcp"},
                        {"address": f"127.0.0.1:{closed}", "module": "udp"},
                        {"address": f"127.0.0.1:{closed}", "module": "tcp"},
                    ],
                },
            )

            async def soak() -> tuple[int, int, int, int]:
                for _ in range(100):  # warm up: caches, lazily created objects
                    await exp.scrape(5.0)
                tracemalloc.start()
                await asyncio.sleep(0.2)  # the in-process peers' connections wind down
                # Cyclic garbage not yet collected is not held memory: how much of it is
                # pending at either point varies with load (this failed on a busy machine
                # before any change here, by 0.4 to 2 MB, all of it freed by a collection).
                gc.collect()
                fd0, mem0 = unheld_fds(), tracemalloc.get_traced_memory()[0]
                for _ in range(900):
                    await exp.scrape(5.0)
                await asyncio.sleep(0.2)
                gc.collect()
                fd1, mem1 = unheld_fds(), tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
                return fd0, fd1, mem0, mem1

            # pytest keeps every log record a test emits (for its report): at a level an
            # earlier test in the same process left lower, the soak's own failed-probe
            # records were what grew (6.4 MB with --log-level=DEBUG). The exporter keeps
            # no record; logging is off while memory is measured.
            logging.disable(logging.CRITICAL)
            try:
                fd0, fd1, mem0, mem1 = asyncio.run(soak())
            finally:
                logging.disable(logging.NOTSET)
        finally:
            hole.close()
    assert exp.scrapes_total == 1000
    states = {(st.target.port, st.target.module): st for st in exp.prober.states.values()}
    reasons = {k: st.last.reason if st.last else None for k, st in states.items()}
    # The good server answered (its latency histogram counts answers). Not "its last probe
    # succeeded": with a 20 ms timeout against a server thread of this same process, one
    # late answer in a thousand scrapes is the machine's load, not a leak (this failed on a
    # busy machine, now and then).
    assert sum(states[(good.port, "udp")].buckets) > 0
    assert sum(states[(good.port, "tcp")].buckets) > 0
    assert reasons[(hole.port, "udp")] is Reason.TIMEOUT
    assert reasons[(closed, "tcp")] is Reason.REFUSED
    assert fd1 == fd0, f"descriptors {fd0} -> {fd1}"
    # Python memory allocated and still held after 900 scrapes (not RSS): bounded well
    # below one scrape's worth of garbage per scrape.
    assert mem1 - mem0 < 256 * 1024, f"traced memory grew {mem1 - mem0} bytes"


# ------------------------------------------------------------------------ reloads


def http(e: ExporterProcess, path: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(e.url + path, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in exposition")


BROKEN: list[tuple[str, str]] = [
    ("yaml", "modules: [unclosed\n"),
    ("unknown key", "resolv_conf: []\nmodules: {}\ntargets: []\nprobe_allow_list: []\n"),
    ("bad module ref", "modules: {}\ntargets: [{address: 127.0.0.1, module: nope}]\n"),
    (
        "too many targets",
        "modules: {m: {}}\nlimits: {max_targets: 1}\ntargets:\n"
        "  - {address: 127.0.0.1, module: m}\n"
        "  - {address: 127.0.0.2, module: m}\n",
    ),
    ("not utf-8", "\udcff"),
    # Before the bounded loader: libyaml's C composer died with SIGSEGV on deep nesting (exit
    # 139 on SIGHUP); an alias bomb froze the loop; a FIFO blocked it for good; /dev/urandom
    # ate memory.
    ("deep nesting", "targets: " + "[" * 50_000 + "]" * 50_000 + "\n"),
    (
        "alias bomb",
        'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in pairwise("abcdefghi"))
        + "targets: *i\n",
    ),
    ("fifo", ""),
    ("device", ""),
    ("directory", ""),
    ("deleted", ""),
]


def _replace(conf: Path, what: str, text: str) -> None:
    """Put the broken variant ``what`` where the configuration file was."""
    if conf.is_dir() and not conf.is_symlink():
        conf.rmdir()
    elif conf.exists() or conf.is_symlink():
        conf.unlink()
    if what == "directory":
        conf.mkdir()
    elif what == "fifo":
        os.mkfifo(conf)
    elif what == "device":
        conf.symlink_to("/dev/urandom")
    elif what == "not utf-8":
        conf.write_bytes(b"modules: \xff\n")
    elif what != "deleted":
        conf.write_text(text)


@pytest.mark.integration
def test_broken_reload_keeps_the_old_config(tmp_path: Path) -> None:
    with scripted(lambda q: [answer(q, "a.local.test. 60 IN A 192.0.2.1")]) as good:
        conf = tmp_path / "dnsfleet.yml"
        original = {
            "modules": {"a": A_MODULE},
            "targets": [{"address": good.address, "module": "a"}],
        }
        write_config(conf, original)
        with running_exporter(tmp_path, "--config.file", str(conf), "--web.enable-lifecycle") as e:
            _, first = http(e, "/metrics")
            assert metric(first, "dnsfleet_probe_success") == 1
            for i, (what, text) in enumerate(BROKEN):
                _replace(conf, what, text)
                if i % 2:
                    failures = e.stderr().count("reload failed")
                    e.signal(signal.SIGHUP)
                    deadline = time.monotonic() + 10
                    while e.stderr().count("reload failed") == failures:
                        assert time.monotonic() < deadline, "SIGHUP not handled"
                        time.sleep(0.05)
                else:
                    status, body = http(e, "/-/reload", "POST")
                    assert status == 500, what
                    assert body.startswith("reload failed, old configuration kept: "), body
                _, after = http(e, "/metrics")
                assert metric(after, "dnsfleet_config_last_reload_successful") == 0, what
                assert metric(after, "dnsfleet_targets") == 1, what
                assert metric(after, "dnsfleet_probe_success") == 1, what  # still probing
                assert e.proc.poll() is None
            _replace(conf, "deleted", "")
            write_config(conf, {**original, "targets": []})
            assert http(e, "/-/reload", "POST")[0] == 200
            _, final = http(e, "/metrics")
            assert metric(final, "dnsfleet_config_last_reload_successful") == 1
            assert metric(final, "dnsfleet_targets") == 0


@pytest.mark.integration
def test_reloads_run_off_the_loop_and_coalesce(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N12: reloads ran on the event loop (one reload of a 10,000-target file stalled every
    request for 1.06 s; a SIGHUP storm pushed /-/healthy to 7.9 s). The load runs in a
    worker thread, and requests arriving meanwhile share one more load. Held here with a
    load that blocks until released: the loop answers /-/healthy while it is blocked (the
    wait is a hang guard, not a timing assertion), and fifty requests cost two loads."""
    from dnsfleet.endpoints.router import make_router
    from dnsfleet.web.server import serve

    exp = exporter_for(tmp_path, {"targets": []})
    real = config_mod.load
    threads: list[int] = []
    gate = threading.Event()

    def blocking_load(path: str) -> config_mod.Config:
        threads.append(threading.get_ident())
        assert gate.wait(30)
        return real(path)

    monkeypatch.setattr(config_mod, "load", blocking_load)

    async def healthy(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try:
            return await reader.read()
        finally:
            writer.close()

    async def go() -> None:
        srv = await serve(make_router(exp), "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            for _ in range(50):  # a SIGHUP storm
                exp.request_reload()
            await asyncio.sleep(0)  # the first load starts and blocks in its thread
            answer = await asyncio.wait_for(healthy(port), timeout=20)
            assert answer.startswith(b"HTTP/1.1 200"), answer
            gate.set()
            status = await asyncio.wait_for(exp.reload(), timeout=30)
            assert status.successful
        finally:
            srv.close()
            await srv.wait_closed()

    loop_thread = threading.get_ident()
    asyncio.run(go())
    # Fifty signals and one request while the first load ran: that load and one more.
    # (exp.reload() above joined the second.)
    assert len(threads) == 2, len(threads)
    assert loop_thread not in threads


@pytest.mark.integration
def test_the_daemon_does_not_import_what_a_scrape_never_uses() -> None:
    """The exporter's resident memory is a requirement (bench/bench_probe.py): the command
    line tools' dnspython query modules (about 3.5 MB), aiohttp (only HTTP statistics
    sources), bcrypt (only basic auth) and RE2 (only answer checks) stay out of a daemon
    that loads none of those features."""
    heavy = ("dns.message", "dns.query", "dnsfleet.capacity.command", "aiohttp", "bcrypt", "re2")
    code = (
        "import sys, dnsfleet.cli, dnsfleet.app, dnsfleet.endpoints.router\n"
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == []


@pytest.mark.integration
def test_deep_nesting_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """The same file in a process of its own whose address space is capped at 256 MiB (the
    whole process peaks near 30 MiB here): a parser that built the levels would fail with
    MemoryError or die instead of refusing."""
    p = tmp_path / "deep.yml"
    p.write_text("targets: " + "[" * 50_000 + "]" * 50_000 + "\n")
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))\n"
        "from dnsfleet import config\n"
        "try:\n"
        "    config.load(sys.argv[1])\n"
        "except config.ConfigError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    m = re.fullmatch(rf"{re.escape(str(p))}:1:\d+: (.*)\n", out.stdout)
    assert m and EARLY.fullmatch(m.group(1)), out.stdout
