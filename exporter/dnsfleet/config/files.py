"""Reading configuration files safely: regular files only, opened without blocking, never
read past a bound, stamped so a reload can tell whether the path still holds what was read;
and a YAML file's top-level mapping with the :class:`~dnsfleet.config.reader.Source` that
lets errors cite line and column."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from dnsfleet.config.reader import ConfigError, Source
from dnsfleet.config.values import describe, preview
from dnsfleet.config.yamlload import load_yaml

# A 20,000-target file is about 1.5 MB; anything far beyond is a mistake or an attack.
MAX_FILE_BYTES = 16 * 1024 * 1024

# What identifies a version of a file: (mtime in ns, size, inode).
FileStamp = tuple[int, int, int]


def file_stamp(st: os.stat_result) -> FileStamp:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def read_regular_file(
    path: str | Path, *, limit: int = MAX_FILE_BYTES, stamps: dict[str, FileStamp] | None = None
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ConfigError naming the file
    otherwise. Opened without blocking (a FIFO with no writer would block open() and read()
    forever), refused unless it is a regular file (a FIFO, a socket, /dev/urandom, a
    directory), and never read past ``limit``, whatever fstat said the size was.
    ``stamps`` gets the stamp of the very file read (fstat of the open descriptor), so a
    caller can tell later whether the path still holds what it read."""
    path = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file ({_file_kind(st.st_mode)})")
        if st.st_size > limit:
            raise ConfigError(f"{path}: larger than {limit // 2**20} MiB")
        if stamps is not None:
            stamps[path] = file_stamp(st)
        chunks: list[bytes] = []
        total = 0
        while total <= limit:  # the size may have changed since fstat
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise ConfigError(f"{path}: larger than {limit // 2**20} MiB")
    return b"".join(chunks)


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a file"


def read_yaml_mapping(
    path: str | Path, *, stamps: dict[str, FileStamp] | None = None
) -> dict[str, Any] | None:
    """A YAML file whose top level is a mapping (None when empty); ConfigError naming the
    file, and the line and column of a YAML error, otherwise."""
    return read_yaml_source(path, stamps=stamps)[0]


def read_yaml_source(
    path: str | Path, *, stamps: dict[str, FileStamp] | None = None
) -> tuple[dict[str, Any] | None, Source]:
    """:func:`read_yaml_mapping`, and the :class:`Source` that lets the root :class:`Node`
    of the document cite the line and column of what it rejects."""
    path = str(path)
    try:
        text = read_regular_file(path, stamps=stamps).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    try:
        data = load_yaml(text)
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except ValueError as e:  # a constructor's int() of a number past Python's 4,300 digits
        raise ConfigError(f"{path}: invalid YAML: {preview(e)}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{path}{where}: invalid YAML: {problem}") from None
    if data is not None and not isinstance(data, dict):
        root = Source(text).root()
        where = f":{root.start_mark.line + 1}:{root.start_mark.column + 1}" if root else ""
        raise ConfigError(
            f"{path}{where}: expected a mapping at the top level, got {describe(data)}"
        )
    return data, Source(text)
