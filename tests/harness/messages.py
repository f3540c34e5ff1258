"""Configuration error messages in tests: ``file:line:column: key.path: problem``."""

from __future__ import annotations

import re
from pathlib import Path


def without_position(message: str, path: str | Path) -> str:
    """``message`` with the ``:line:column`` after ``path`` taken out, after checking it is
    there: for tests about the problem, whose documents are written by yaml.safe_dump (the
    positions are checked where the file is written by hand, tests/configs/invalid)."""
    head = re.escape(str(path))
    m = re.match(rf"({head}):(\d+):(\d+): ", message)
    assert m, f"no file:line:column in {message!r}"
    assert int(m[2]) >= 1 and int(m[3]) >= 1
    return f"{m[1]}: {message[m.end() :]}"
