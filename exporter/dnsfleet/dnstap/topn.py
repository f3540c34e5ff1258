"""Top-N heavy hitters in bounded memory, for the dnstap insight families.

What it is for: the dnstap aggregator ranks registered domains by NXDOMAIN and by SERVFAIL
answers, and client addresses by queries, without holding one counter per distinct key:
50,000 random names must cost the same memory as 50. The random-subdomain detector
(`subdomains.py`) uses it as its first stage. It renders nothing; the caller exports
`top(n)` with n capped at configuration load.

Algorithm: Space-Saving (Metwally, Agrawal, El Abbadi 2005, "Efficient computation of
frequent and top-k elements in data streams") in an amortised form. The table holds fewer
than `2 * capacity` keys; when it reaches that size it is sorted once and cut to the
`capacity` largest, and the largest dropped count becomes the `floor` every new key starts
from. So:

* a count is never below the key's true count, and `count - error(key)` never above it;
* a key whose true count exceeds `floor` is in the table (had it been dropped, its count
  then was at most the floor, and it re-enters at the floor plus its weight);
* a key added before the first compaction and never dropped is exact (`error` 0): this is
  what makes the heavy hitters of a window exact in practice;
* memory is `< 2 * capacity` keys whatever arrives; `add` is O(1) amortised (one sort of
  `2 * capacity` entries per `capacity` new keys).
"""

from __future__ import annotations

__all__ = ["SpaceSaving"]


def _rank(item: tuple[str, int]) -> tuple[int, str]:
    return (-item[1], item[0])


class SpaceSaving:
    """Approximate counts of the most frequent keys; at most `2 * capacity - 1` held."""

    __slots__ = ("_counts", "_errors", "capacity", "floor", "total")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._counts: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self.floor = 0  # largest count ever dropped: a new key's possible overestimate
        self.total = 0  # sum of all weights added

    def add(self, key: str, weight: int = 1) -> None:
        """Count `weight` (at least 1) more for `key`."""
        if weight < 1:
            raise ValueError(f"weight must be at least 1, not {weight}")
        self.total += weight
        counts = self._counts
        count = counts.get(key)
        if count is not None:
            counts[key] = count + weight
            return
        if self.floor:
            self._errors[key] = self.floor
        counts[key] = self.floor + weight
        if len(counts) >= 2 * self.capacity:
            self._compact()

    def _compact(self) -> None:
        items = sorted(self._counts.items(), key=_rank)
        keep, drop = items[: self.capacity], items[self.capacity :]
        if drop:
            self.floor = max(self.floor, drop[0][1])
        self._counts = dict(keep)
        errors = self._errors
        self._errors = {key: errors[key] for key, _ in keep if key in errors}

    def count(self, key: str) -> int:
        """The key's estimated count (an upper bound), 0 when it is not held."""
        return self._counts.get(key, 0)

    def error(self, key: str) -> int:
        """How much the key's count may exceed its true count."""
        return self._errors.get(key, 0)

    def guaranteed(self, key: str) -> int:
        """A lower bound of the key's true count (0 when it is not held)."""
        return self._counts.get(key, 0) - self._errors.get(key, 0)

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, key: object) -> bool:
        return key in self._counts

    def top(self, n: int) -> list[tuple[str, int]]:
        """The `n` largest (key, count), count descending, ties by key ascending."""
        if n <= 0:
            return []
        return sorted(self._counts.items(), key=_rank)[:n]

    def clear(self) -> None:
        """Forget everything (a new window)."""
        self._counts = {}
        self._errors = {}
        self.floor = 0
        self.total = 0
