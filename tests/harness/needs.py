"""What the suite needs beyond its venv (tests/needs.txt): read it, find each entry, name
what is missing. `make test` runs this after installing the packages, before pytest:

    python -m tests.harness.needs          # exit 1 naming each missing entry and its package
    python -m tests.harness.needs --debs   # the Debian packages of the missing entries
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LIST = Path(__file__).resolve().parent.parent / "needs.txt"
# Where a program is looked for beyond PATH: root's sbin directories, which a user's PATH
# may lack.
SEARCH = ("/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/bin", "/usr/local/go/bin")
# A program started from one of these is the machine's, not the venv's or the test's own
# build: it must be listed.
SYSTEM_DIRS = frozenset(
    {
        "/usr/bin",
        "/bin",
        "/usr/sbin",
        "/sbin",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/usr/local/go/bin",
    }
)


@dataclass(frozen=True)
class Need:
    what: str  # a program's name, or an absolute path
    package: str  # the Debian package, or "image"
    line: int


def parse(text: str) -> list[Need]:
    needs = []
    for n, raw in enumerate(text.splitlines(), 1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            raise ValueError(f"{LIST}:{n}: expected 'WHAT PACKAGE', got {raw!r}")
        needs.append(Need(fields[0], fields[1], n))
    return needs


@cache
def needs() -> tuple[Need, ...]:
    return tuple(parse(LIST.read_text()))


@cache
def programs() -> frozenset[str]:
    """The programs listed (by name)."""
    return frozenset(n.what for n in needs() if not n.what.startswith("/"))


def find(program: str) -> str | None:
    path = shutil.which(program)
    if path:
        return path
    for d in SEARCH:
        cand = os.path.join(d, program)
        if os.access(cand, os.X_OK):
            return cand
    return None


def present(need: Need) -> bool:
    if need.what.startswith("/"):
        return os.path.exists(need.what)
    return find(need.what) is not None


def missing() -> list[Need]:
    return [n for n in needs() if not present(n)]


def main(argv: list[str]) -> int:
    gone = missing()
    if argv[1:] == ["--debs"]:
        print(" ".join(sorted({n.package for n in gone if n.package != "image"})))
        return 0
    if not gone:
        print(f"tests/needs.txt: all {len(needs())} present")
        return 0
    print(f"tests/needs.txt: {len(gone)} of {len(needs())} missing:", file=sys.stderr)
    for n in gone:
        where = (
            "comes with the machine image"
            if n.package == "image"
            else f"Debian package {n.package}"
        )
        print(f"  {n.what} ({where}; tests/needs.txt:{n.line})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
