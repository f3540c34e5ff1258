"""hostfs.HeldFiles: per-scrape attributes kept open and read again with pread at 0. What it
reads is what a fresh open would read: a rewrite in place, a descriptor the kernel fails
(a removed sysfs attribute: ENODEV) read afresh by path, the cap, a second thread."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from dnsfleet import hostfs, selfmetrics
from dnsfleet.hostfs import HELD_FILES_MAX, HeldFiles, HostFS, HostReadError, held_files_cap

pytestmark = pytest.mark.unit


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def room(n: int) -> int:
    """A cap that leaves room for ``n`` more: the cap counts what every HeldFiles of the
    process holds (the collectors' tests before this one may have left some held)."""
    return hostfs._Held.open + n


def files(tmp_path: Path, n: int) -> list[str]:
    paths = []
    for k in range(n):
        p = tmp_path / f"cpu{k}" / "usage"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"{k}\n")
        paths.append(str(p))
    return paths


def test_rewrites_in_place_are_read_and_missing_files_are_none(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    held = HeldFiles(cap=room(16))
    paths = [*files(tmp_path, 3), str(tmp_path / "gone")]
    assert fs.read_held(held, paths) == [b"0\n", b"1\n", b"2\n", None]
    assert len(held) == 3
    Path(paths[1]).write_text("123456789\n")
    Path(paths[2]).write_text("")
    assert fs.read_held(held, paths) == [b"0\n", b"123456789\n", b"", None]
    (tmp_path / "gone").write_text("7\n")
    assert fs.read_held(held, paths)[3] == b"7\n"
    held.close()
    assert len(held) == 0


def test_a_failing_descriptor_is_read_afresh_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sysfs attribute whose kobject is gone (CPU hotplug, a driver unregistered) fails
    a held descriptor's read with ENODEV; the path then says what there is now."""
    held = HeldFiles(cap=room(16))
    paths = files(tmp_path, 2)
    held.read(paths)
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))

    monkeypatch.setattr(os, "pread", pread)
    os.unlink(paths[0])
    Path(paths[1]).unlink()
    Path(paths[1]).write_text("new\n")
    before = open_fds()
    assert held.read(paths) == [None, b"new\n"]
    assert open_fds() == before - 1  # the first one's descriptor closed, the second's anew
    monkeypatch.setattr(os, "pread", real_pread)
    assert held.read(paths) == [None, b"new\n"]
    held.close()


def test_beyond_the_cap_files_are_opened_each_time(tmp_path: Path) -> None:
    """The cap counts every HeldFiles of the process (others may hold files already)."""
    held = HeldFiles(cap=room(2))
    paths = files(tmp_path, 5)
    before = open_fds()
    assert held.read(paths) == [f"{k}\n".encode() for k in range(5)]
    assert len(held) == 2 and open_fds() == before + 2
    for k, p in enumerate(paths):
        Path(p).write_text(f"{k * 10}\n")
    assert held.read(paths) == [f"{k * 10}\n".encode() for k in range(5)]
    held.close()
    assert open_fds() == before


def test_large_files_and_errors_are_read_as_read_bytes_does(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    held = HeldFiles(cap=room(16))
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    assert held.read([str(big)]) == [b"x" * 5000]
    assert len(held) == 0  # more than one small read: not held
    (tmp_path / "dir").mkdir()
    with pytest.raises(HostReadError) as e:
        held.read([str(tmp_path / "dir")])
    assert str(e.value).startswith(f"{tmp_path / 'dir'}: ")
    assert fs.read_bytes(big) == b"x" * 5000


def test_a_second_thread_reads_afresh_while_the_first_holds_the_files(tmp_path: Path) -> None:
    """The host lane retires a stuck thread and starts another: the two never share a
    descriptor (one could close what the other reads)."""
    held = HeldFiles(cap=room(16))
    paths = files(tmp_path, 2)
    held.read(paths)
    got: list[list[bytes | None]] = []
    with held._lock:  # the stuck thread, mid-read
        Path(paths[0]).write_text("9\n")
        t = threading.Thread(target=lambda: got.append(held.read(paths)))
        t.start()
        t.join(timeout=30)
        held.close()  # deferred to the reader holding the lock
        assert len(held) == 2
    assert got == [[b"9\n", b"1\n"]]
    held.read(paths)  # the stuck reader's next read closes them as it ends
    assert len(held) == 0


@pytest.mark.parametrize(
    ("soft", "cap"), [(0, 0), (256, 32), (1024, 128), (20_000, 2500), (2**31, HELD_FILES_MAX)]
)
def test_the_cap_is_an_eighth_of_the_soft_limit_at_most(soft: int, cap: int) -> None:
    assert held_files_cap(soft) == cap


def test_prune_closes_what_was_not_asked_for(tmp_path: Path) -> None:
    held = HeldFiles(cap=room(16))
    paths = files(tmp_path, 4)
    before = open_fds()
    held.read(paths, prune=True)
    assert open_fds() == before + 4
    assert held.read(paths[1:3], prune=True) == [b"1\n", b"2\n"]
    assert len(held) == 2 and open_fds() == before + 2
    held.close()
    assert open_fds() == before


def test_process_open_fds_counts_held_files(tmp_path: Path) -> None:
    held = HeldFiles(cap=room(64))
    before = selfmetrics.open_fds()
    held.read(files(tmp_path, 50))
    assert selfmetrics.open_fds() == before + 50
    held.close()
    assert selfmetrics.open_fds() == before


def test_a_larger_size_holds_larger_files_and_reads_beyond_it_whole(tmp_path: Path) -> None:
    """A per-CPU seq_file (/proc/net/stat/nf_conntrack) outgrows the default first read."""
    held = HeldFiles(cap=room(16), size=1024)
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(b"s" * 600)
    big.write_bytes(b"b" * 3000)
    paths = [str(small), str(big)]
    assert held.read(paths) == [b"s" * 600, b"b" * 3000]
    assert len(held) == 1
    small.write_bytes(b"t" * 1023)
    assert held.read(paths) == [b"t" * 1023, b"b" * 3000]
    small.write_bytes(b"u" * 1024)  # fills the read: read whole afresh, no longer held
    assert held.read(paths) == [b"u" * 1024, b"b" * 3000]
    assert len(held) == 0
    held.close()


def test_prune_at_the_cap_closes_what_was_not_asked_for(tmp_path: Path) -> None:
    """At the cap not every path asked for is held: what was held for a path no longer
    asked for (a process gone, an IRQ freed) is closed all the same, and its room goes to
    the paths asked for now, not to the gone ones for good."""
    held = HeldFiles(cap=room(2))
    paths = files(tmp_path, 4)
    before = open_fds()
    held.read(paths[:2], prune=True)
    assert open_fds() == before + 2
    # The first gone, three asked for: one more than the cap holds.
    assert held.read(paths[1:], prune=True) == [b"1\n", b"2\n", b"3\n"]
    assert paths[0] not in held._fds
    assert len(held) <= 2 and open_fds() == before + len(held)
    held.read(paths[2:], prune=True)
    assert paths[1] not in held._fds
    held.read(paths[2:], prune=True)  # the room freed goes to the paths asked for
    assert sorted(held._fds) == paths[2:]
    held.close()
    assert open_fds() == before
