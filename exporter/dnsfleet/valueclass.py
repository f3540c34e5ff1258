"""``@value``: a dataclass that the type checker holds immutable, built at the cost of a
plain one.

A ``@dataclass(frozen=True)`` makes every field of every instance cost a call of
``object.__setattr__`` in its ``__init__``, since its own ``__setattr__`` refuses. Each
probe makes three such objects (the answer's ``Response``, the ``Exchange``, the
``ProbeResult``): a 1,000-target scrape makes 3,000, and a /probe request three. A
frozen dataclass of ten fields took 7 times as long to make as the same dataclass
unfrozen (``python -m timeit``: ~3.4 µs against ~0.5 µs on the shared bench machine).

``@value`` keeps what frozen gave the code: mypy --strict (run by ``make test`` over the
whole package) refuses an assignment to a field, through PEP 681's ``frozen_default``,
and instances hash and compare by their fields (``unsafe_hash``), as a frozen
dataclass's do. What it gives up is the refusal at run time, which nothing relied on.
Only the per-probe classes use it; the rest stay ``frozen=True``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def value(cls: type[T]) -> type[T]:
    """A slotted dataclass, immutable to the type checker, hashed by its fields."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
