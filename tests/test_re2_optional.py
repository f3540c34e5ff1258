"""google-re2 is optional (the `re2` extra; Debian has no package of it): without it a
configuration with regular expressions is refused at load with the reason, and every other
configuration loads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dnsfleet.config import ConfigError, load

pytestmark = pytest.mark.unit


def test_regexes_refused_without_re2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "re2", None)  # import re2 now raises ImportError
    p = tmp_path / "c.yml"
    p.write_text(
        "modules:\n  m: {query_name: a.test, fail_if_not_matches: ['192\\.0\\.2\\.1']}\n"
        "targets:\n  - {address: 127.0.0.1, module: m}\n"
    )
    with pytest.raises(ConfigError) as e:
        load(p)
    assert str(e.value) == (
        f"{p}:2:27: modules.m.fail_if_not_matches: regular expressions need the google-re2 "
        "Python module, which is not installed (pip install google-re2; see "
        "docs/deployment.md)"
    )
    p.write_text(
        "modules:\n  m: {query_name: a.test, fail_if_matches: []}\n"
        "targets:\n  - {address: 127.0.0.1, module: m}\n"
    )
    assert load(p).modules["m"].fail_if_matches == ()
