"""The committed lock (requirements/*.txt, written by `make lock`) against what it is resolved
from: pyproject.toml's ranges and requirements/*.in. A dependency changed on one side only
fails here by name; the venv the suite runs in is the locked set."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path
from typing import cast

import pytest
from packaging.markers import default_environment as _default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "requirements"))
from lockinputs import LOCKS, digest  # noqa: E402

pytestmark = pytest.mark.unit

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PROJECT["project"]["optional-dependencies"]
# What each lock is resolved from (requirements/lock.sh).
SOURCES: dict[str, list[str]] = {
    "build": [*(ROOT / "requirements/build.in").read_text().splitlines()],
    "run": [*PROJECT["project"]["dependencies"], *EXTRAS["re2"], *EXTRAS["dnstap"]],
    "test": [
        *PROJECT["project"]["dependencies"],
        *EXTRAS["re2"],
        *EXTRAS["dnstap"],
        *EXTRAS["test"],
    ],
    "bench": [*(ROOT / "requirements/bench.in").read_text().splitlines()],
}


def default_environment() -> dict[str, str]:
    return cast(dict[str, str], _default_environment())


PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def pins(lock: str) -> dict[str, tuple[str, str | None, int]]:
    """name -> (version, marker, hashes) of one lock file."""
    found: dict[str, tuple[str, str | None, int]] = {}
    name = ""
    for line in (ROOT / f"requirements/{lock}.txt").read_text().splitlines():
        m = PIN.match(line)
        if m:
            name = canonicalize_name(m.group(1))
            found[name] = (m.group(2), m.group(3), 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, marker, hashes = found[name]
            found[name] = (version, marker, hashes + 1)
    return found


def requirements(lock: str) -> list[Requirement]:
    lines = (s.split("#", 1)[0].strip() for s in SOURCES[lock])
    return [Requirement(s) for s in lines if s]


@pytest.mark.parametrize("lock", LOCKS)
def test_the_lock_is_resolved_from_todays_inputs(lock: str) -> None:
    first = (ROOT / f"requirements/{lock}.txt").read_text().splitlines()[0]
    assert first.endswith(f"inputs: {digest()}"), (
        f"requirements/{lock}.txt is stale: pyproject.toml's dependencies or "
        "requirements/*.in changed since it was written; run `make lock` and commit the result"
    )


@pytest.mark.parametrize("lock", LOCKS)
def test_every_requirement_is_pinned_within_its_range_with_hashes(lock: str) -> None:
    locked = pins(lock)
    assert locked, lock
    env = default_environment()
    for req in requirements(lock):
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        assert name in locked, f"{req} is not in requirements/{lock}.txt: run `make lock`"
        version = locked[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements/{lock}.txt pins {name}=={version}, outside {req}: run `make lock`"
        )
    unhashed = sorted(n for n, (_, _, hashes) in locked.items() if hashes == 0)
    assert not unhashed, f"no hash for {unhashed} in requirements/{lock}.txt"


def test_the_suite_tests_what_make_run_installs() -> None:
    """The test set holds every runtime pin as it is (lock.sh compiles it under run.txt)."""
    run, test = pins("run"), pins("test")
    moved = {
        n: (v[0], test.get(n, ("absent",))[0])
        for n, v in run.items()
        if test.get(n, ("absent",))[0] != v[0]
    }
    assert not moved, f"run.txt and test.txt disagree (run, test): {moved}"


def test_this_venv_is_the_locked_set() -> None:
    """What the suite runs on is what the lock says, to the version (`make test` made it)."""
    env = default_environment()
    wrong = {}
    for name, (version, marker, _) in pins("test").items():
        applies = Requirement(f"x; {marker}").marker if marker else None
        if applies is not None and not applies.evaluate(env):
            continue
        try:
            got = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            got = "absent"
        if canonicalize_name(got) != canonicalize_name(version):
            wrong[name] = (version, got)
    assert not wrong, f"the venv differs from requirements/test.txt (locked, installed): {wrong}"
