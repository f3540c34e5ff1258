"""The digest of what the lock is resolved from: pyproject.toml's Python range, build
requirements, dependencies and extras, and every requirements/*.in file. lock.sh writes it
into each lock's first line; tests/test_lock.py recomputes it, so a dependency changed in
pyproject.toml without `make lock` fails the suite by name."""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ("build", "run", "test", "bench")


def inputs(root: Path = ROOT) -> dict[str, object]:
    project = tomllib.loads((root / "pyproject.toml").read_text())
    return {
        "requires-python": project["project"]["requires-python"],
        "build-system": project["build-system"]["requires"],
        "dependencies": project["project"]["dependencies"],
        "optional-dependencies": project["project"]["optional-dependencies"],
        "in": {p.name: p.read_text() for p in sorted((root / "requirements").glob("*.in"))},
    }


def digest(root: Path = ROOT) -> str:
    text = json.dumps(inputs(root), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


if __name__ == "__main__":
    sys.stdout.write(digest() + "\n")
