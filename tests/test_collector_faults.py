"""The collector framework under permission-denied, missing, garbage, oversized and hanging
host files: the collector that hit it reports failure (success 0, the reason logged), the
others are unaffected. The real host collectors test their own files; here
stand-in collectors read a fixture tree through HostFS the same way."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet.collectors import CollectContext, Collector, CollectorError, host_collector
from dnsfleet.collectors.base import run_collectors
from dnsfleet.config import Config, HostConfig, builtin_default
from dnsfleet.exposition import Family, render
from dnsfleet.hostfs import MAX_READ_BYTES, HostFS
from tests.harness.tools import binary

ROOT = Path(__file__).resolve().parent.parent


def parse_counter_file(text: str) -> int:
    """A pure parser in the style of parsers/: one integer, else ValueError."""
    first = text.split("\n", 1)[0].strip()
    if not first.isdigit():
        raise ValueError(f"expected an integer, got {first[:40]!r}")
    return int(first)


def file_collector(name: str, *parts: str) -> Collector:
    def collect(fs: HostFS, cfg: Config) -> list[Family]:
        text = fs.read_optional(fs.proc(*parts))
        if text is None:
            return []  # subsystem absent: not a failure
        return [
            Family(f"test_{name}_value", "Value read from a fixture.").add(parse_counter_file(text))
        ]

    return host_collector(name, collect)


def buggy(fs: HostFS, cfg: Config) -> list[Family]:
    empty: dict[str, float] = {}
    return [Family("x", "y").add(empty["missing"])]


def slow(fs: HostFS, cfg: Config) -> list[Family]:
    time.sleep(1.5)
    return [Family("test_slow_value", "Never seen.").add(1)]


def raising(fs: HostFS, cfg: Config) -> list[Family]:
    raise CollectorError("bond0: slave count 3 but 2 slave sections")


COLLECTORS = {
    c.name: c
    for c in (
        file_collector("healthy", "healthy"),
        file_collector("denied", "denied"),
        file_collector("missing", "no", "such", "file"),
        file_collector("garbage", "garbage"),
        file_collector("binary", "binary"),
        file_collector("huge", "huge"),
        file_collector("directory", "adir"),
        host_collector("buggy", buggy),
        host_collector("slow", slow),
        host_collector("raising", raising),
    )
}


def make_tree(root: Path) -> None:
    proc = root / "proc"
    proc.mkdir(parents=True)
    (proc / "healthy").write_text("42\n")
    (proc / "denied").write_text("7\n")
    (proc / "denied").chmod(0)
    (proc / "garbage").write_text("forty-two\n")
    (proc / "binary").write_bytes(b"\x00\xff" + os.urandom(254))
    with open(proc / "huge", "wb") as f:
        f.truncate(MAX_READ_BYTES + 1)  # sparse: more than any sane pseudo-file
    (proc / "adir").mkdir()


def scenario(root: str) -> dict[str, object]:
    """Run every collector once against the tree at ``root``; JSON-able outcome."""
    fs = HostFS(procfs=Path(root) / "proc", sysfs=Path(root) / "sys", rootfs=Path(root))
    cfg = builtin_default([])
    cfg = Config(
        source=cfg.source,
        modules=cfg.modules,
        targets=(),
        host=HostConfig(collectors=tuple(COLLECTORS)),
    )
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    grab = Grab()
    logger = logging.getLogger("dnsfleet.collectors.base")

    async def go() -> list[Family]:
        loop = asyncio.get_running_loop()
        ctx = CollectContext(fs=fs, config=cfg, deadline=loop.time() + 1.0, state={})
        return await run_collectors(ctx, COLLECTORS)

    # Removed after: left on the logger, it kept every record of every later test in the
    # process (the 1,000-scrape memory soak grew 1.97 MB when it ran after this one).
    logger.addHandler(grab)
    try:
        fams = asyncio.run(go())
    finally:
        logger.removeHandler(grab)
    success = {
        s[1]["collector"]: s[0]
        for s in (
            (v, lab)
            for f in fams
            if f.name == "dnsfleet_collector_success"
            for v, lab in _samples(f)
        )
    }
    return {
        "success": success,
        "names": sorted(f.name for f in fams),
        "logs": records,
        "text": render(fams),
    }


def _samples(f: Family) -> Iterator[tuple[float, dict[str, str]]]:
    text = render([f])
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        labels = dict(
            kv.split("=", 1) for kv in name_labels.split("{", 1)[1].rstrip("}").split(",")
        )
        yield float(value), {k: v.strip('"') for k, v in labels.items()}


@pytest.fixture
def tree() -> Iterator[Path]:
    # Not under pytest's 0700 tmp dir: an unprivileged child must be able to walk to it.
    d = Path(tempfile.mkdtemp(prefix="dnsfleet-faults-"))
    d.chmod(0o755)
    make_tree(d)
    yield d
    shutil.rmtree(d)


def run_unprivileged(tree: Path) -> dict[str, object]:
    """Root reads a mode-000 file anyway (CAP_DAC_OVERRIDE): run the scenario in a child
    without the DAC capabilities, so permission-denied is real, as for an exporter
    running as a dedicated user."""
    code = (
        "import json, sys; "
        f"sys.path.insert(0, {str(ROOT)!r}); "
        "from tests.test_collector_faults import scenario; "
        f"print(json.dumps(scenario({str(tree)!r})))"
    )
    prefix: list[str] = []
    if os.geteuid() == 0:
        drop = "-dac_override,-dac_read_search"
        prefix = [binary("setpriv"), f"--bounding-set={drop}", f"--inh-caps={drop}", "--"]
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


@pytest.mark.integration
def test_each_fault_fails_only_its_collector(tree: Path) -> None:
    r = run_unprivileged(tree)
    assert r["success"] == {
        "healthy": 1.0,
        "missing": 1.0,  # an absent subsystem is not a failure
        "denied": 0.0,
        "garbage": 0.0,
        "binary": 0.0,
        "huge": 0.0,
        "directory": 0.0,
        "buggy": 0.0,
        "slow": 0.0,  # cut at the scrape deadline
        "raising": 0.0,
    }
    names = r["names"]
    assert isinstance(names, list)
    # The healthy collector's data is there; nothing partial from the failed ones.
    assert "test_healthy_value" in names
    assert not [n for n in names if n.startswith("test_") and n != "test_healthy_value"]
    assert "test_healthy_value 42" in str(r["text"])
    assert isinstance(r["logs"], list)
    logs = "\n".join(str(x) for x in r["logs"])
    # Each failure is logged with a reason naming the file or the problem.
    for needle in (
        f"collector denied failed: {tree}/proc/denied: Permission denied",
        "collector garbage failed: expected an integer, got 'forty-two'",
        f"collector huge failed: {tree}/proc/huge: larger than {MAX_READ_BYTES} bytes",
        f"collector directory failed: {tree}/proc/adir: Is a directory",
        "collector buggy failed: 'missing'",
        "collector slow failed: did not finish before the scrape deadline",
        "collector raising failed: bond0: slave count 3 but 2 slave sections",
    ):
        assert needle in logs, needle
    assert "collector binary failed: expected an integer" in logs


@pytest.mark.unit
def test_missing_root_directories(tmp_path: Path) -> None:
    """--path.procfs pointing nowhere: file collectors report the subsystem absent."""
    r = scenario(str(tmp_path / "nowhere"))
    success = r["success"]
    assert isinstance(success, dict)
    assert success["healthy"] == 1.0 and success["denied"] == 1.0
    assert success["buggy"] == 0.0


@pytest.mark.unit
def test_fifo_where_a_file_should_be_does_not_hang(tmp_path: Path) -> None:
    """open() of a FIFO blocks until a writer appears; HostFS must not."""
    import os as _os
    import threading

    from dnsfleet.hostfs import HostFS, HostReadError

    fifo = tmp_path / "interrupts"
    _os.mkfifo(fifo)
    writer_ready = threading.Event()

    def writer() -> None:  # a writer that never writes: read() would block without O_NONBLOCK
        fd = _os.open(fifo, _os.O_WRONLY)
        writer_ready.set()
        threading.Event().wait(5)
        _os.close(fd)

    fs = HostFS(procfs=tmp_path)
    assert fs.read_bytes(fifo) == b""  # no writer: EOF at once
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    # The writer's open() blocks until a reader opens; read in a loop until it is there.
    done = threading.Event()
    outcome: list[object] = []

    def reader() -> None:
        while not writer_ready.is_set():
            try:
                outcome.append(fs.read_bytes(fifo))
            except HostReadError as e:
                outcome.append(e)
        try:
            outcome.append(fs.read_bytes(fifo))
        except HostReadError as e:
            outcome.append(e)
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    assert done.wait(5), "HostFS blocked on a FIFO"
    assert isinstance(outcome[-1], HostReadError)  # writer present, no data: EAGAIN


@pytest.mark.unit
def test_a_hung_host_collector_blocks_neither_the_others_nor_the_next_scrape() -> None:
    """Host collectors share one thread for speed; a read that never returns must not keep
    the queue (or later scrapes) waiting behind it."""
    import threading

    from dnsfleet.collectors.base import (
        HOST_LANE,
        CollectContext,
        host_collector,
        run_collectors,
    )
    from dnsfleet.config import builtin_default
    from dnsfleet.hostfs import HostFS

    release = threading.Event()

    def hung(fs: HostFS, cfg: Config) -> list[Family]:
        release.wait(30)  # a stuck NFS read, as far as Python can tell
        return []

    def fine(fs: HostFS, cfg: Config) -> list[Family]:
        return [Family("test_fine", "ok").add(1)]

    cols = {"hung": host_collector("hung", hung), "fine": host_collector("fine", fine)}
    for c in cols.values():
        object.__setattr__(c, "enabled", lambda cfg: True)
    cfg = builtin_default([])

    async def scrape() -> dict[str, float | None]:
        loop = asyncio.get_running_loop()
        # 3 s, not 1: the fine collector's job must be served within it on a loaded
        # machine (a thread start and a lane hand-off), while the hung one never returns.
        ctx = CollectContext(fs=HostFS(), config=cfg, deadline=loop.time() + 3.0, state={})
        fams = await run_collectors(ctx, cols)
        success = fams[0]
        return {n: success.value({"collector": n}) for n in cols}

    started = HOST_LANE.threads_started
    try:
        for _ in range(2):  # the second scrape starts while the first hung job still runs
            assert asyncio.run(scrape()) == {"hung": 0.0, "fine": 1.0}
        assert HOST_LANE.threads_started > started
    finally:
        release.set()
