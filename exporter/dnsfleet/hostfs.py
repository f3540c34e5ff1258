"""The one door to the host filesystem.

Every path under /proc, /sys, /dev and the root filesystem goes through a :class:`HostFS`
rooted at ``--path.procfs``, ``--path.sysfs`` and ``--path.rootfs`` (node_exporter's
``paths.go``). A fixture tree can stand in for a whole host, /dev/cpu_dma_latency included.
No other module names a literal host path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Kernel pseudo-files are small, but a hostile or broken mount must not make us read forever.
MAX_READ_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024
_SHORT_READ = 4096


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
        # thousands of one-line sysfs files per scrape on large machines. A read shorter than
        # a page is the whole file (sysfs attributes come whole, seq_file fills the buffer
        # until EOF); a longer one may be a chunk, so read on to EOF. O_NONBLOCK: a FIFO
        # planted where a pseudo-file should be would otherwise block open() and read()
        # forever and pin the collector thread; regular, proc, sys and device files ignore it.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                chunks: list[bytes] = []
                size = 0
                while size <= limit:
                    # A page first (nearly every pseudo-file fits), then 64 KiB at a time:
                    # os.read allocates the whole request up front, and asking for the
                    # 4 MiB limit cost an mmap and munmap per file.
                    want = _SHORT_READ if size == 0 else _CHUNK
                    chunk = os.read(fd, min(want, limit + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if size == len(chunk) and size < _SHORT_READ:
                        break
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise HostReadError(f"{path}: {e.strerror or e}") from e
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > limit:
            raise HostReadError(f"{path}: larger than {limit} bytes")
        return data

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

    def pids(self) -> Iterator[int]:
        for name in self.listdir(self.procfs):
            if name.isdigit():
                yield int(name)
