"""The event loop a process of the exporter runs on (``--event-loop``).

uvloop (libuv) where it imports, asyncio's own loop where it does not, or the one asked
for. The loop is made for the command it runs (``asyncio.Runner(loop_factory=...)``), with
no change to the global event loop policy: a library user or a test that calls
``asyncio.run`` keeps asyncio's loop.
"""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

CHOICES = ("auto", "uvloop", "asyncio")

T = TypeVar("T")
# The loop this process chose last, for the processes it starts (the dnstap ingest's is
# started with the exporter, before its loop runs).
_chosen: list[str] = []


class Unavailable(Exception):
    """``--event-loop=uvloop`` where uvloop does not import; the message says why."""


@dataclass(frozen=True)
class Loop:
    """The loop chosen: its kind (``uvloop`` or ``asyncio``), the version that says which
    code it is (uvloop's, or Python's for asyncio's own) and what makes it (None: asyncio's
    default)."""

    kind: str
    version: str
    factory: Callable[[], asyncio.AbstractEventLoop] | None

    def __str__(self) -> str:
        return f"{self.kind} {self.version}"


def choose(asked: str) -> Loop:
    """The loop for ``--event-loop=asked`` (one of :data:`CHOICES`)."""
    if asked not in CHOICES:
        raise ValueError(f"event loop {asked!r}: want one of {', '.join(CHOICES)}")
    if asked != "asyncio":
        try:
            import uvloop  # noqa: PLC0415 - an accelerator: present or not, decided here
        except ImportError as e:
            if asked == "uvloop":
                raise Unavailable(f"uvloop does not import: {e}") from None
        else:
            _chosen[:] = ["uvloop"]
            return Loop("uvloop", str(getattr(uvloop, "__version__", "")), uvloop.new_event_loop)
    _chosen[:] = ["asyncio"]
    return Loop("asyncio", platform.python_version(), None)


def run(main: Coroutine[Any, Any, T], loop: Loop) -> T:
    """``asyncio.run(main)`` on ``loop``."""
    with asyncio.Runner(loop_factory=loop.factory) as runner:
        return runner.run(main)


def running_kind() -> str:
    """``uvloop`` or ``asyncio``: the kind of the loop running now, for a process started
    from this one to run on the same (``auto`` where none runs)."""
    try:
        module = type(asyncio.get_running_loop()).__module__
    except RuntimeError:
        return "auto"
    return "uvloop" if module.partition(".")[0] == "uvloop" else "asyncio"


def drops_reader_on_error(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` stops watching a file descriptor for good once epoll reports
    EPOLLERR on it (an ICMP error queued on a socket with IP_RECVERR), having run its reader
    once: uvloop does (libuv ends the uv_poll with UV_EBADF and uvloop closes it), asyncio's
    loop keeps watching. Its reader must then be added again."""
    return type(loop).__module__.partition(".")[0] == "uvloop"


def for_child() -> str:
    """``--event-loop`` for a process started from this one: the kind of the loop running
    now, else of the one this process chose, else ``auto``."""
    kind = running_kind()
    return _chosen[-1] if kind == "auto" and _chosen else kind
