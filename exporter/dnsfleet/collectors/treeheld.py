"""The files one reader of a host collector holds open between scrapes (hostfs.HeldFiles),
for the host tree it read last: a collector reads one tree (a test, a tree of its own), and
a new tree closes the old one's descriptors."""

from __future__ import annotations

from collections.abc import Callable

from dnsfleet.hostfs import HeldFiles, HostFS


class TreeHeld:
    """A HeldFiles for the host tree read last, and the paths read last: handed back as the
    same object while they stay the same, which HeldFiles reads with a pread each and no
    lookup. ``size``: HeldFiles' read size (its default when None)."""

    __slots__ = ("_fs", "_held", "_key", "_paths", "size")

    def __init__(self, *, size: int | None = None) -> None:
        self.size = size
        self._fs: HostFS | None = None
        self._held: HeldFiles | None = None
        self._key: object = None
        self._paths: list[str] = []

    def __len__(self) -> int:
        """Descriptors held now."""
        return 0 if self._held is None else len(self._held)

    def read(
        self,
        fs: HostFS,
        paths: Callable[[], list[str]],
        *,
        key: object = None,
        prune: bool = False,
        unreadable_as_missing: bool = False,
    ) -> list[bytes | None]:
        """The files ``paths()`` names, as :meth:`HostFS.read_held` reads them. ``key``: a
        token cheaper to compare than the paths it makes (the PIDs of /proc/<pid>/comm):
        while it equals the last read's, ``paths`` is not called."""
        held = self._held
        if held is None or fs != self._fs:
            if held is not None:
                held.close()
            held = self._held = HeldFiles() if self.size is None else HeldFiles(size=self.size)
            self._fs, self._key, self._paths = fs, None, []
        if key is None or key != self._key:
            self._key = key
            made = paths()
            if made != self._paths:
                self._paths = made
        return fs.read_held(
            held, self._paths, prune=prune, unreadable_as_missing=unreadable_as_missing
        )
