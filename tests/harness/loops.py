"""The event loops the exporter runs on (dnsfleet.eventloop): a test of code that meets the
loop closely (its sockets, transports, timers and TLS) runs on each with ``@both`` and its
``loop_kind`` argument, handing its coroutine to :func:`run`."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from dnsfleet import eventloop

T = TypeVar("T")
KINDS = ("asyncio", "uvloop")
both = pytest.mark.parametrize("loop_kind", KINDS)


def run(main: Coroutine[Any, Any, T], kind: str = "asyncio") -> T:
    """``asyncio.run(main)`` on the loop of that kind (uvloop is in the test venv)."""
    loop = eventloop.choose(kind)
    assert loop.kind == kind, f"{kind} asked, {loop} made"
    return eventloop.run(main, loop)
