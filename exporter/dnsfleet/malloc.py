"""glibc heap tuning for a process whose scrapes allocate megabytes and free them again.

A 1,000-target exposition is ~3 MB, built in family-sized pieces of several hundred KB.
glibc serves allocations above M_MMAP_THRESHOLD with mmap and returns them to the kernel
on free, but its threshold is *dynamic*: after the first such buffer is freed it rises to
that size, later buffers come from the brk heap, and the heap fragments and rarely shrinks.
Pinning it (mallopt) disables the adjustment. With that, the heap trimmed before each
scrape, and the response written without an extra copy, bench/bench_soak.py (200 scrapes of
1,000 targets) held RSS at 36.6 MiB at every checkpoint, where it had swung between 36 and
47.6 MiB. Not glibc: both calls are no-ops.

The same scrapes make tens of thousands of container objects that live one cycle;
:func:`tune_gc` keeps CPython's cyclic collector from walking them over and over, and
:func:`collector_paused` keeps it out of a scrape's cycle altogether.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Iterator

M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, pinned
# Allocations of container objects between two young collections (CPython's default: 700).
# A cycle of N targets makes about ten tracked objects per target (the probe, its answer,
# its result, the record's rows) that live until the next cycle: at 700, a 10,000-target
# cycle ran over a hundred young collections that found nothing to free, and their
# survivors set off a full collection of the whole heap about once a cycle (a third of the
# cycle's CPU). Garbage cycles wait a little longer to be found; refcounting frees the rest
# as before.
GC_YOUNG_THRESHOLD = 10_000


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def tune() -> bool:
    """Pin the mmap threshold; True when glibc accepted it."""
    libc = _libc()
    try:
        return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except AttributeError:  # a libc without mallopt
        return False


def tune_gc() -> None:
    """Collect the young generation less often (see GC_YOUNG_THRESHOLD); the older
    generations keep their default ratios."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


class _Pauses:
    cycles = 0  # under way that paused the collector (cycles of two scrapers overlap)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off while a scrape's cycle runs, on again when the last cycle
    under way ends. A cycle makes its objects (probes, answers, results, the record's rows)
    faster than any threshold keeps up with, and nearly all of them live on to the next
    cycle: the young collections that ran during a 10,000-target cycle freed nothing.
    Paused, a 10,000-target scrape cost 1.4-4.8 % less CPU (four rounds, paused and not in
    turn). Refcounting frees the cycle's garbage as before; garbage cycles wait for the
    first collection after it, which is bounded by the cycle's deadline.
    A collector already off (``gc.disable`` by someone else) is left off."""
    if _Pauses.cycles == 0 and not gc.isenabled():
        yield
        return
    _Pauses.cycles += 1
    gc.disable()
    try:
        yield
    finally:
        _Pauses.cycles -= 1
        if _Pauses.cycles == 0:
            gc.enable()


def trim() -> None:
    """Give free heap pages back to the kernel (malloc_trim); cheap when little is free."""
    libc = _libc()
    try:
        if libc is not None:
            libc.malloc_trim(0)
    except AttributeError:
        pass
