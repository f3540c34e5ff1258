"""Control and bidi characters from outside are printed as visible escapes in every output
stream: the escape itself, configuration errors, ``--config.check``, and log lines in both
formats. Letters of any script are left alone."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dnsfleet import config, logs
from dnsfleet.config import ConfigError
from dnsfleet.escapes import escape
from tests.test_logs import parse_logfmt

# (raw, as printed)
HOSTILE = [
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # ESC: clear the screen
    ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # OSC: set the window title
    ("\x9b31m", "\\x9b31m"),  # C1 CSI (U+009B)
    ("abc\u202edef", "abc\\u202edef"),  # RIGHT-TO-LEFT OVERRIDE
    ("\u2066x\u2069", "\\u2066x\\u2069"),  # LEFT-TO-RIGHT ISOLATE .. POP DIRECTIONAL ISOLATE
    ("a\u200eb\u200fc\u061c", "a\\u200eb\\u200fc\\u061c"),  # LRM, RLM, ARABIC LETTER MARK
    ("x\x7fy\x00", "x\\x7fy\\x00"),  # DEL, NUL
    ("line\rover\bwrite", "line\\rover\\x08write"),
    ("two\nlines\tand tab", "two\\nlines\\tand tab"),
]
PLAIN = ["Zürich", "東京", "مرحبا", "Ελλάδα", "ñandú ✓ 🦆", "back\\slash", ""]


@pytest.mark.unit
@pytest.mark.parametrize(("raw", "shown"), HOSTILE)
def test_escape(raw: str, shown: str) -> None:
    assert escape(raw) == shown
    assert escape(shown) == shown  # idempotent: escaping twice changes nothing


@pytest.mark.unit
@pytest.mark.parametrize("text", PLAIN)
def test_plain_text_untouched(text: str) -> None:
    assert escape(text) == text


@pytest.mark.unit
def test_keep_newlines() -> None:
    assert escape("a\n\tb\r\x1b", keep_newlines=True) == "a\n\tb\\r\\x1b"


def _load_error(tmp_path: Path, doc: object) -> str:
    p = tmp_path / "dnsfleet.yml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True))
    with pytest.raises(ConfigError) as e:
        config.load(p)
    return str(e.value)


@pytest.mark.unit
@pytest.mark.parametrize(("raw", "shown"), HOSTILE)
def test_config_errors_escape_values_and_keys(tmp_path: Path, raw: str, shown: str) -> None:
    value = _load_error(tmp_path, {"targets": [], "modules": {"m": {"timeout": raw}}})
    assert f'modules.m.timeout: invalid duration "{shown}"' in value
    key = _load_error(tmp_path, {"targets": [], "modules": {"m": {raw: 1}}})
    assert f"modules.m.{shown}" in key
    assert escape(value) == value and escape(key) == key


def _line(fmt: str, msg: str, attr: str) -> str:
    rec = logging.LogRecord(
        "dnsfleet.x", logging.WARNING, "/a/app.py", 7, "reload: %s", (msg,), None
    )
    rec.__dict__["target"] = attr
    return logs.FORMATTERS[fmt]().format(rec)


@pytest.mark.unit
@pytest.mark.parametrize("fmt", logs.FORMATTERS)
@pytest.mark.parametrize(("raw", "shown"), HOSTILE)
def test_log_lines_escape(fmt: str, raw: str, shown: str) -> None:
    line = _line(fmt, raw, raw)
    assert escape(line) == line, line  # nothing a terminal obeys, in the line as written
    rec = json.loads(line) if fmt == "json" else parse_logfmt(line)
    assert rec["msg"] == f"reload: {shown}" and rec["target"] == shown


@pytest.mark.unit
@pytest.mark.parametrize("fmt", logs.FORMATTERS)
@pytest.mark.parametrize("text", PLAIN)
def test_log_lines_keep_plain_text(fmt: str, text: str) -> None:
    line = _line(fmt, text, text)
    rec = json.loads(line) if fmt == "json" else parse_logfmt(line)
    assert rec["msg"] == f"reload: {text}" and rec["target"] == text


@pytest.mark.integration
def test_config_check_output_is_escaped(tmp_path: Path) -> None:
    """--config.check prints for a person at a terminal: what the file holds must not drive
    it."""
    raws = "".join(raw for raw, _ in HOSTILE)
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"targets": [], "modules": {"m": {"timeout": raws}}}))
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet", f"--config.file={bad}", "--config.check"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1
    assert "modules.m.timeout: invalid duration" in out.stderr
    assert escape(out.stderr.rstrip("\n")) == out.stderr.rstrip("\n"), out.stderr
    assert "\\x1b[2J" in out.stderr and "\\u202e" in out.stderr
