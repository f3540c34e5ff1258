"""The nic collector finds the resolver's processes by comm through descriptors it keeps open
between scrapes; what it reports is what a fresh scan of every /proc/<pid>/comm would say,
at the next scrape: a resolver restarted under a new PID, a wrapper that exec()s into the
resolver under its PID, a PID that a gone process leaves to another.

The fixture trees are regular files, so the tests do to them what the kernel does to procfs:
a process's name changes in place (exec, prctl), and a gone process's files go; a held
descriptor of a gone process fails its read with ESRCH (comm_show: the inode's struct pid
has no task), which ``procfs_reads`` makes a descriptor of a removed fixture file do. The
real kernel does both in ``test_a_real_process_that_execs_and_exits``."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dnsfleet.collectors import nic, niclocality
from dnsfleet.config import Config, parse
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS
from tests.harness import metrics
from tests.harness.hosttree import (
    TREES,
    TreeWriter,
    add_process,
    held_reads_fail_once_removed,
    stat_line,
)
from tests.harness.metrics import of

CONFIG = parse({"targets": [], "host": {"resolver_process": "unbound"}}, source="test")


@pytest.fixture
def procfs_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A held descriptor of a removed fixture file fails as procfs fails one of a gone
    process (ESRCH), instead of reading the unlinked file's old bytes."""
    held_reads_fail_once_removed(monkeypatch, errno.ESRCH)


def tree(tmp_path: Path) -> tuple[TreeWriter, HostFS]:
    root = tmp_path / "x86"
    shutil.copytree(TREES / "x86", root, symlinks=True)
    return TreeWriter(root), HostFS(procfs=root / "proc", sysfs=root / "sys", rootfs=root / "root")


def resolver(fams: list[Family], name: str = "dnsfleet_resolver_processes") -> float | None:
    return metrics.value(of(fams), name, process="unbound")


def scrape(fs: HostFS, config: Config = CONFIG) -> tuple[float | None, float | None]:
    """(processes named unbound, threads of the one with the most)."""
    fams = nic.collect(fs, config)
    return resolver(fams), resolver(fams, "dnsfleet_resolver_threads")


def gone(t: TreeWriter, pid: int) -> None:
    shutil.rmtree(t.root / "proc" / str(pid))


@pytest.mark.unit
@pytest.mark.usefixtures("procfs_reads")
def test_a_resolver_restarted_under_a_new_pid_shows_at_the_next_scrape(tmp_path: Path) -> None:
    t, fs = tree(tmp_path)
    assert scrape(fs) == (2, 4)  # 812 with four threads, 905 with one
    gone(t, 812)
    gone(t, 905)
    add_process(t, 3000, "unbound", [1, 2, 5])
    assert scrape(fs) == (1, 3)
    # The gone processes' descriptors are let go of: one a process.
    assert len(niclocality._COMMS) == len(list(fs.pids()))


@pytest.mark.unit
@pytest.mark.usefixtures("procfs_reads")
def test_a_wrapper_that_execs_into_the_resolver_under_its_pid_shows_at_the_next_scrape(
    tmp_path: Path,
) -> None:
    t, fs = tree(tmp_path)
    add_process(t, 1500, "unbound-wrap", [0, 1, 2, 3, 4, 5])
    assert scrape(fs) == (2, 4)
    # execve() renames the task in place (its comm file is the same file, read anew).
    add_process(t, 1500, "unbound", [0, 1, 2, 3, 4, 5])
    assert scrape(fs) == (3, 6)
    # And back: the resolver exec()s a helper under its PID.
    add_process(t, 1500, "unbound-helper", [0])
    assert scrape(fs) == (2, 4)


@pytest.mark.unit
@pytest.mark.usefixtures("procfs_reads")
def test_a_pid_a_gone_process_leaves_to_another_is_read_as_the_new_process(
    tmp_path: Path,
) -> None:
    t, fs = tree(tmp_path)
    assert scrape(fs) == (2, 4)
    # The resolver with four threads exits, and its PID goes to a shell.
    gone(t, 812)
    add_process(t, 812, "bash")
    assert scrape(fs) == (1, 1)
    # sshd exits, and the resolver, restarted, is given its PID.
    gone(t, 990)
    add_process(t, 990, "unbound", [0, 1, 2, 3, 4, 5, 6])
    assert scrape(fs) == (2, 7)


@pytest.mark.unit
@pytest.mark.usefixtures("procfs_reads")
def test_irqbalance_started_and_stopped_shows_at_the_next_scrape(tmp_path: Path) -> None:
    t, fs = tree(tmp_path)
    running = "dnsfleet_irqbalance_running"
    assert metrics.value(of(nic.collect(fs, CONFIG)), running) == 0
    add_process(t, 4000, "irqbalance")
    assert metrics.value(of(nic.collect(fs, CONFIG)), running) == 1
    gone(t, 4000)
    assert metrics.value(of(nic.collect(fs, CONFIG)), running) == 0


@pytest.mark.unit
@pytest.mark.usefixtures("procfs_reads")
def test_the_resolvers_threads_moved_started_and_ended_show_at_the_next_scrape(
    tmp_path: Path,
) -> None:
    t, fs = tree(tmp_path)
    config = parse(
        {"targets": [], "host": {"resolver_process": "unbound", "nic_include": "eth1"}},
        source="test",
    )

    def cpus_and_shared() -> tuple[float | None, float | None]:
        fams = of(nic.collect(fs, config))
        return (
            metrics.value(fams, "dnsfleet_resolver_cpus", process="unbound"),
            metrics.value(
                fams, "dnsfleet_nic_resolver_shared_cpus", device="eth1", process="unbound"
            ),
        )

    # 812's four threads ran on CPUs 0, 1, 5, 6; eth1's queue interrupts go to CPU 0.
    assert cpus_and_shared() == (4, 1)
    t.write("proc/812/task/812/stat", stat_line(812, "unbound", 7))  # migrated off CPU 0
    assert cpus_and_shared() == (4, 0)
    add_process(t, 812, "unbound", [0, 1, 5, 6, 2, 3])  # two threads started, one on CPU 0
    assert scrape(fs) == (2, 6)
    assert cpus_and_shared() == (6, 1)
    shutil.rmtree(t.root / "proc/812/task/816")  # the thread on CPU 2 ended
    assert scrape(fs) == (2, 5)
    assert cpus_and_shared() == (5, 1)


CHILD = """
import os, sys
def name(n):
    with open("/proc/self/comm", "w") as f:
        f.write(n)
name(sys.argv[1])
print("ready", flush=True)
if sys.stdin.readline().strip() == "exec":
    os.execv(sys.executable, [sys.executable, "-c", sys.argv[2], sys.argv[3]])
"""

# After execve() the task is named after the program's file: the new program renames itself
# to the name the test looks for, as a resolver's own binary would be named.
AFTER_EXEC = """
import sys
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.integration
def test_a_real_process_that_execs_and_exits(tmp_path: Path) -> None:
    """On the real /proc: a process renamed under its PID by exec shows through the held
    descriptor at the next scrape, and once it is gone its PID reads as gone, not as the
    name it had."""
    tag = uuid.uuid4().hex[:8]
    wrapper, name = f"wrap{tag}", f"res{tag}"
    config = parse({"targets": [], "host": {"resolver_process": name}}, source="test")
    fs = HostFS()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, wrapper, AFTER_EXEC, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        assert resolver_processes(fs, config, name) == 0
        assert child.pid in niclocality.process_pids(fs, [wrapper])[wrapper]
        child.stdin.write("exec\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ready"
        assert resolver_processes(fs, config, name) == 1
        child.stdin.write("end\n")
        child.stdin.flush()
        child.wait(timeout=30)
        deadline = time.monotonic() + 30
        while child.pid in niclocality.process_pids(fs, [name])[name]:
            assert time.monotonic() < deadline, "the reaped process still reads as running"
            time.sleep(0.05)
        assert resolver_processes(fs, config, name) == 0
    finally:
        child.kill()
        child.wait(timeout=30)


def resolver_processes(fs: HostFS, config: Config, name: str) -> float | None:
    return metrics.value(of(nic.collect(fs, config)), "dnsfleet_resolver_processes", process=name)
