"""HostFS.read_many, the bulk reader of one directory's small files: the same bytes as
read_bytes, None for what is missing, an error naming the one file that could not be read,
no descriptor left open, never blocked by a FIFO."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dnsfleet.hostfs import HostFS, HostReadError

pytestmark = pytest.mark.unit

# Around the bulk reader's first read (256 bytes), a page, and its 64 KiB chunks.
SIZES = (0, 1, 255, 256, 257, 4095, 4096, 4097, 65_536 + 300, 200_000)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_same_bytes_as_read_bytes_at_every_size(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    names = []
    for n in SIZES:
        (tmp_path / f"f{n}").write_bytes(bytes((i * 7 + n) % 251 for i in range(n)))
        names.append(f"f{n}")
    got = fs.read_many(tmp_path, names)
    assert got == [fs.read_bytes(tmp_path / name) for name in names]
    assert [len(g or b"") for g in got] == list(SIZES)


def test_missing_files_and_directories_are_none(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    (tmp_path / "cpu0" / "cpuidle").mkdir(parents=True)
    (tmp_path / "cpu0" / "cpuidle" / "usage").write_text("12\n")
    names = ["cpuidle/usage", "cpuidle/time", "cpufreq/scaling_governor", "cpuidle/usage"]
    assert fs.read_many(tmp_path / "cpu0", names) == [b"12\n", None, None, b"12\n"]
    assert fs.read_many(tmp_path / "cpu9", names) == [None] * 4
    assert fs.read_many(str(tmp_path / "cpu0"), []) == []


def test_each_read_is_fresh(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    (tmp_path / "disable").write_text("0\n")
    assert fs.read_many(tmp_path, ["disable"]) == [b"0\n"]
    (tmp_path / "disable").write_text("1\n")
    assert fs.read_many(tmp_path, ["disable"]) == [b"1\n"]


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.mkdir(), "Is a directory"),
        (lambda p: p.write_bytes(b"x" * 300), "larger than 299 bytes"),
    ],
)
def test_an_unreadable_file_is_named(
    tmp_path: Path, make: Callable[[Path], object], expected: str
) -> None:
    fs = HostFS(sysfs=tmp_path)
    (tmp_path / "a").write_text("1\n")
    make(tmp_path / "b")
    before = open_fds()
    with pytest.raises(HostReadError) as e:
        fs.read_many(tmp_path, ["a", "b", "c"], limit=299)
    assert str(e.value) == f"{tmp_path}/b: {expected}"
    assert open_fds() == before


def test_base_that_is_a_file(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    (tmp_path / "cpu0").write_text("not a directory\n")
    with pytest.raises(HostReadError, match=f"^{tmp_path}/cpu0: Not a directory$"):
        fs.read_many(tmp_path / "cpu0", ["usage"])


def test_no_descriptor_left_open(tmp_path: Path) -> None:
    fs = HostFS(sysfs=tmp_path)
    for n in range(50):
        (tmp_path / f"state{n}").write_text(f"{n}\n")
    before = open_fds()
    for _ in range(3):
        got = fs.read_many(tmp_path, [f"state{n}" for n in range(60)])
        assert got[:50] == [f"{n}\n".encode() for n in range(50)] and got[50:] == [None] * 10
    assert open_fds() == before


def test_a_fifo_does_not_block(tmp_path: Path) -> None:
    """A FIFO planted where an attribute should be: no writer, EOF at once (O_NONBLOCK);
    without it open() would wait for a writer forever and pin the host lane's thread."""
    fs = HostFS(sysfs=tmp_path)
    os.mkfifo(tmp_path / "usage")
    assert fs.read_many(tmp_path, ["usage"]) == [b""]


def test_unreadable_as_missing(tmp_path: Path) -> None:
    """For /proc/<pid> files of processes that exit while they are read (ESRCH): here a
    directory and an oversized file, which no read gets through either."""
    fs = HostFS(procfs=tmp_path)
    for pid, comm in ((1, "systemd"), (2, "gone"), (3, "huge"), (4, "unbound")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(f"{comm}\n")
    (tmp_path / "2" / "comm").unlink()
    (tmp_path / "2" / "comm").mkdir()
    (tmp_path / "3" / "comm").write_bytes(b"x" * 100)
    names = [f"{pid}/comm" for pid in range(1, 6)]
    before = open_fds()
    got = fs.read_many(tmp_path, names, limit=64, unreadable_as_missing=True)
    assert got == [b"systemd\n", None, None, b"unbound\n", None]
    with pytest.raises(HostReadError, match=f"^{tmp_path}/2/comm: Is a directory$"):
        fs.read_many(tmp_path, names, limit=64)
    assert open_fds() == before
