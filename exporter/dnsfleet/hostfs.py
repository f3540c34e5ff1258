"""The one door to the host filesystem.

Every path under /proc, /sys, /dev and the root filesystem goes through a :class:`HostFS`
rooted at ``--path.procfs``, ``--path.sysfs`` and ``--path.rootfs`` (node_exporter's
``paths.go``). A fixture tree can stand in for a whole host, /dev/cpu_dma_latency included.
No other module names a literal host path.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# Kernel pseudo-files are small, but a hostile or broken mount must not make us read forever.
MAX_READ_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024
_SHORT_READ = 4096
# The first read of a file read_many opens: a sysfs attribute of one number or CPU list.
_ATTR_READ = 256
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
# Files a HeldFiles keeps open: at most this many, and an eighth of the soft open-file limit
# (the probes' socket budget leaves that much aside, selfmetrics.probe_concurrency).
HELD_FILES_MAX = 4096


# Hot loops (thousands of per-CPU sysfs files) build string paths under a root given by
# this object: constructing a pathlib.Path costs more than reading a small file.
StrPath = str | Path


class HostReadError(OSError):
    """A host file exists but could not be read or was larger than any sane pseudo-file."""


@dataclass(frozen=True)
class HostFS:
    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    rootfs: Path = Path("/")

    @classmethod
    def from_flags(cls, *, procfs: str, sysfs: str, rootfs: str) -> HostFS:
        """Build from flag values. When only --path.rootfs is moved (containers mounting the
        host at /host), /proc and /sys follow it unless they were given explicitly."""
        root = Path(rootfs)
        proc = Path(procfs)
        sys_ = Path(sysfs)
        if root != Path("/"):
            if proc == Path("/proc"):
                proc = root / "proc"
            if sys_ == Path("/sys"):
                sys_ = root / "sys"
        return cls(procfs=proc, sysfs=sys_, rootfs=root)

    def proc(self, *parts: str) -> Path:
        return self.procfs.joinpath(*parts)

    def sys(self, *parts: str) -> Path:
        return self.sysfs.joinpath(*parts)

    def root(self, *parts: str) -> Path:
        """A path on the host's root filesystem, e.g. ``root("etc", "resolv.conf")``."""
        return self.rootfs.joinpath(*(p.lstrip("/") for p in parts))

    def dev(self, *parts: str) -> Path:
        return self.rootfs.joinpath("dev", *parts)

    # Reading. FileNotFoundError passes through untouched: callers treat it as "no data".
    # Anything else that stops a read becomes HostReadError with the path in the message.

    def read_bytes(self, path: StrPath, *, limit: int = MAX_READ_BYTES) -> bytes:
        # os.open/os.read rather than open(): half the cost per file, and host collectors read
        # thousands of one-line sysfs files per scrape on large machines. O_NONBLOCK: a FIFO
        # planted where a pseudo-file should be would otherwise block open() and read()
        # forever and pin the collector thread; regular, proc, sys and device files ignore it.
        try:
            fd = os.open(path, _OPEN_FLAGS)
            try:
                data = _read_fd(fd, _SHORT_READ, limit)
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise HostReadError(f"{path}: {e.strerror or e}") from e
        if len(data) > limit:
            raise HostReadError(f"{path}: larger than {limit} bytes")
        return data

    def read_many(
        self,
        base: StrPath,
        names: Sequence[str],
        *,
        limit: int = MAX_READ_BYTES,
        unreadable_as_missing: bool = False,
    ) -> list[bytes | None]:
        """The files ``base/name`` for each name, in order; None for one that does not
        exist (all None when ``base`` does not). Errors as :meth:`read_bytes`, naming the
        file; with ``unreadable_as_missing``, a file that cannot be read is None too (the
        /proc/<pid> files of a process that exits while they are read: ESRCH).

        For the thousands of one-line sysfs attributes a large host has per scrape (per-CPU
        cpuidle counters, IRQ affinities): each name is opened relative to ``base`` opened
        once (openat), so the kernel walks the path under ``base`` only, and the first read
        asks for a small buffer (os.read allocates what it is asked for). Every file is
        opened and read afresh: counters and settings are never cached."""
        try:
            dfd = os.open(base, _OPEN_FLAGS | os.O_DIRECTORY)
        except FileNotFoundError:
            return [None] * len(names)
        except OSError as e:
            raise HostReadError(f"{base}: {e.strerror or e}") from e
        out: list[bytes | None] = []
        try:
            for name in names:
                try:
                    out.append(_read_at(dfd, name, limit))
                except FileNotFoundError:
                    out.append(None)
                except OSError as e:
                    if not unreadable_as_missing:
                        raise HostReadError(f"{base}/{name}: {e.strerror or e}") from e
                    out.append(None)
        finally:
            os.close(dfd)
        return out

    def read_held(
        self,
        held: HeldFiles,
        paths: Sequence[str],
        *,
        prune: bool = False,
        unreadable_as_missing: bool = False,
    ) -> list[bytes | None]:
        """The files at ``paths`` (under this object's roots) through ``held``: see
        :class:`HeldFiles`. None for a file that does not exist (and, with
        ``unreadable_as_missing``, for one that cannot be read, as :meth:`read_many`)."""
        return held.read(paths, prune=prune, unreadable_as_missing=unreadable_as_missing)

    def read_text(self, path: StrPath, *, limit: int = MAX_READ_BYTES) -> str:
        return self.read_bytes(path, limit=limit).decode("utf-8", errors="replace")

    def read_optional(self, path: StrPath) -> str | None:
        """Text of the file, or None when it does not exist."""
        try:
            return self.read_text(path)
        except FileNotFoundError:
            return None

    def stat(self, path: StrPath) -> os.stat_result:
        """FileNotFoundError passes through ("no data"); other errors become HostReadError."""
        try:
            return os.stat(path)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise HostReadError(f"{path}: {e.strerror or e}") from e

    def exists(self, path: StrPath) -> bool:
        return os.path.exists(path)

    def listdir(self, path: StrPath) -> list[str]:
        """Sorted entry names; [] when the directory does not exist."""
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except OSError as e:
            raise HostReadError(f"{path}: {e.strerror or e}") from e

    def entries(self, path: StrPath) -> list[tuple[str, int]]:
        """Sorted (name, inode number) of a directory's entries, the inode number from the
        listing itself (d_ino: no stat of each entry); [] when the directory does not
        exist."""
        try:
            with os.scandir(path) as it:
                return sorted((e.name, e.inode()) for e in it)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise HostReadError(f"{path}: {e.strerror or e}") from e

    def pids(self) -> Iterator[int]:
        for name in self.listdir(self.procfs):
            if name.isdigit():
                yield int(name)


def held_files_cap(soft_limit: int) -> int:
    """Pure: how many files HeldFiles may keep open under a soft RLIMIT_NOFILE."""
    return max(0, min(HELD_FILES_MAX, soft_limit // 8))


class HeldFiles:
    """Sysfs attributes read every scrape, kept open and read again with pread at offset 0.

    A 128-CPU host has ~1,800 per-CPU attributes that change at run time (cpuidle
    ``usage``, ``time``, ``disable``, ``pm_qos_resume_latency_us``, the governor): opening
    each afresh was most of the host scrape (about 8 us a file on sysfs here against under
    1 us for a pread). Re-reading an open attribute is exact: "If userspace seeks back to
    zero or does a pread(2) with an offset of '0' the show() method will be called again"
    (Documentation/filesystems/sysfs.rst); seq_file files under /proc do the same. An
    attribute whose kobject goes (CPU hotplug, a cpuidle driver unregistered) fails the held
    descriptor's read (kernfs: ENODEV), and the path is opened afresh: a file that no longer
    exists reads as None. A regular file (a fixture tree) rewritten in place is read anew;
    one replaced by another file under the same name is not seen through the old
    descriptor, which sysfs never does to an attribute.

    Bounded: at most ``cap`` descriptors over every HeldFiles of the process
    (:func:`held_files_cap` of the soft limit when not given); the paths beyond it are
    opened and read each time, as :meth:`HostFS.read_bytes`. ``prune``: close what this
    read did not ask for (the set of paths changes: IRQs come and go).
    ``unreadable_as_missing``: a path that cannot be opened or read is None, as
    :meth:`HostFS.read_many` (a /proc/<pid> file of a process that exits as it is read).
    ``size``: what one pread asks for; a file that fills it is read whole afresh each time
    and not held (a per-CPU seq_file of a larger host than the size was chosen for).
    One thread at a time: a reader that finds another (the host lane's retired, stuck
    thread) still reading opens its files afresh, so no descriptor is used or closed by two
    threads at once."""

    def __init__(self, cap: int | None = None, *, size: int = _ATTR_READ) -> None:
        if cap is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            cap = held_files_cap(2**31 if soft == resource.RLIM_INFINITY else soft)
        self.cap = cap
        self.size = size
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._closing = False
        # The last paths read when every one was held, and their descriptors in order: the
        # same paths next scrape are one pread each, without a lookup.
        self._run: tuple[Sequence[str], list[int]] | None = None

    def __len__(self) -> int:
        return len(self._fds)

    def read(
        self, paths: Sequence[str], *, prune: bool = False, unreadable_as_missing: bool = False
    ) -> list[bytes | None]:
        if not self._lock.acquire(blocking=False):
            return [_read_fresh(p, None, 0, unreadable_as_missing, self.size) for p in paths]
        try:
            size = self.size
            if self._run is not None and self._run[0] is paths:
                try:
                    data = [os.pread(fd, size, 0) for fd in self._run[1]]
                except OSError:
                    pass
                else:
                    if not data or max(map(len, data)) < size:
                        return list(data)
            self._run = None
            out = self._read(paths, unreadable_as_missing)
            every = len(self._fds) >= len(paths) and all(p in self._fds for p in paths)
            # Not every path held (the cap): a held one may be one no longer asked for.
            if prune and (len(self._fds) > len(paths) or not every):
                asked = set(paths)
                for path in [p for p in self._fds if p not in asked]:
                    _close_held(self._fds.pop(path))
            if every:
                self._run = (paths, [self._fds[p] for p in paths])
            return out
        finally:
            if self._closing:
                self._close_fds()
            self._lock.release()

    def _read(self, paths: Sequence[str], unreadable_as_missing: bool) -> list[bytes | None]:
        fds = self._fds
        pread = os.pread
        size = self.size
        out: list[bytes | None] = []
        for path in paths:
            fd = fds.get(path)
            if fd is not None:
                try:
                    data = pread(fd, size, 0)
                except OSError:
                    data = b"\0" * size  # read the path afresh below
                if len(data) < size:
                    out.append(data)
                    continue
                del fds[path]
                _close_held(fd)
            out.append(_read_fresh(path, fds, self.cap, unreadable_as_missing, size))
        return out

    def close(self) -> None:
        """Close every held descriptor; now, or when the thread reading is done."""
        self._closing = True
        if self._lock.acquire(blocking=False):
            try:
                self._close_fds()
            finally:
                self._lock.release()

    def _close_fds(self) -> None:
        self._run = None
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            _close_held(fd)


class _Held:
    """Descriptors held by every HeldFiles of the process (the cap is the process's)."""

    open = 0
    lock = threading.Lock()


def _close_held(fd: int) -> None:
    with _Held.lock:
        _Held.open -= 1
    os.close(fd)


def _read_fresh(
    path: str,
    keep: dict[str, int] | None,
    cap: int,
    unreadable_as_missing: bool = False,
    size: int = _ATTR_READ,
) -> bytes | None:
    """The file at ``path`` opened and read (None: it does not exist, or, with
    ``unreadable_as_missing``, cannot be read); its descriptor is kept in ``keep`` when the
    file fits one read of ``size`` bytes and fewer than ``cap`` are held."""
    try:
        return _open_read(path, keep, cap, size)
    except OSError:
        if unreadable_as_missing:
            return None
        raise


def _open_read(path: str, keep: dict[str, int] | None, cap: int, size: int) -> bytes | None:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise HostReadError(f"{path}: {e.strerror or e}") from e
    try:
        data = _read_fd(fd, size, MAX_READ_BYTES)
    except OSError as e:
        os.close(fd)
        raise HostReadError(f"{path}: {e.strerror or e}") from e
    if len(data) > MAX_READ_BYTES:
        os.close(fd)
        raise HostReadError(f"{path}: larger than {MAX_READ_BYTES} bytes")
    if keep is not None and len(data) < size:
        with _Held.lock:
            held = _Held.open < cap
            _Held.open += held
        if held:
            keep[path] = fd
            return data
    os.close(fd)
    return data


def _read_at(dfd: int, name: str, limit: int) -> bytes:
    fd = os.open(name, _OPEN_FLAGS, dir_fd=dfd)
    try:
        data = _read_fd(fd, _ATTR_READ, limit)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise HostReadError(f"larger than {limit} bytes")
    return data


def _read_fd(fd: int, first: int, limit: int) -> bytes:
    """A file's bytes from an open descriptor, at most ``limit + 1`` (the caller refuses
    more than ``limit``): ``first`` bytes asked first (nearly every pseudo-file fits), then
    64 KiB at a time to EOF; os.read allocates the whole request up front, and asking for
    the 4 MiB limit cost an mmap and munmap per file. A read shorter than asked is the whole
    file: sysfs attributes come whole and seq_file fills the buffer until EOF, so only a
    full read needs another."""
    want = min(first, limit + 1)
    chunk = os.read(fd, want)
    if len(chunk) < want:
        return chunk
    chunks = [chunk]
    size = len(chunk)
    while size <= limit:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
