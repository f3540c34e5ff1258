"""The Debian package as `make deb` builds it (packaging/build-deb.sh), for the tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_deb() -> Path:
    out = subprocess.run(
        [str(ROOT / "packaging" / "build-deb.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    path = ROOT / out.stdout.strip().splitlines()[-1]
    assert path.is_file(), path
    return path
