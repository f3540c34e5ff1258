"""Log lines (``--log.format=logfmt|json``): every line the exporter writes in a whole run
(start, scrapes, a probe failure, a good and a bad reload, shutdown) parses with a strict
logfmt parser, or with json.loads, into ts, level, source and msg first, as promslog
writes them. A property test round-trips any message through both formats (control and
bidi characters come back as their visible escapes, tests/test_escapes.py)."""

from __future__ import annotations

import itertools
import json
import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dnsfleet import logs
from dnsfleet.escapes import escape
from tests.harness.exporter import ExporterProcess
from tests.harness.metrics import matching, samples, value
from tests.harness.servers import Unbound
from tests.harness.tools import free_port

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
SOURCE = re.compile(r"[\w.-]+\.py:\d+")
_PAIR = re.compile(r'([^\s="]+)=("(?:[^"\\]|\\.)*"|[^\s="]+)')


def parse_logfmt(line: str) -> dict[str, str]:
    """Strict logfmt (go-logfmt's grammar without its leniencies): ``key=value`` pairs
    separated by one space, every key with a value, no key twice, a value bare (printable,
    no space, ``=`` or ``"``) or a quoted string with backslash escapes."""
    out: dict[str, str] = {}
    pos = 0
    while True:
        m = _PAIR.match(line, pos)
        if m is None:
            raise ValueError(f"not logfmt at column {pos}: {line!r}")
        key, raw = m.groups()
        if key in out:
            raise ValueError(f"duplicate key {key!r}: {line!r}")
        if raw.startswith('"'):
            out[key] = json.loads(raw)
        elif not raw.isprintable():
            raise ValueError(f"unprintable bare value: {line!r}")
        else:
            out[key] = raw
        pos = m.end()
        if pos == len(line):
            return out
        if line[pos] != " " or pos + 1 == len(line):
            raise ValueError(f"not logfmt at column {pos}: {line!r}")
        pos += 1


PARSERS: dict[str, Callable[[str], Any]] = {"logfmt": parse_logfmt, "json": json.loads}


def check_line(line: str, fmt: str) -> dict[str, Any]:
    rec: dict[str, Any] = PARSERS[fmt](line)
    assert list(rec)[:4] == ["ts", "level", "source", "msg"], line
    assert TS.fullmatch(rec["ts"]), line
    assert rec["level"] in logs.LEVELS, line
    assert SOURCE.fullmatch(rec["source"]), line
    return rec


@pytest.mark.unit
def test_strict_parser_refuses_what_is_not_logfmt() -> None:
    # The format before --log.format: a space in ts, an unquoted message.
    old = "ts=2026-11-23 15:32:31,109 level=INFO logger=dnsfleet msg=listening on :9853"
    for bad in (old, 'a="x', "a=1  b=2", "a=1 a=2", "a=1 ", "=1", 'a=x"y'):
        with pytest.raises(ValueError):
            parse_logfmt(bad)
    assert parse_logfmt('a=1 b="x \\"y\\"\\n" c=\\') == {"a": "1", "b": 'x "y"\n', "c": "\\"}


def _record(msg: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("dnsfleet.x", logging.WARNING, "/a/b/app.py", 42, "%s", (msg,), None)
    rec.__dict__.update(extra)
    return rec


@pytest.mark.unit
@given(msg=st.text(), attr=st.text())
def test_any_message_round_trips(msg: str, attr: str) -> None:
    for fmt, formatter in logs.FORMATTERS.items():
        line = formatter().format(_record(msg, target=attr))
        assert "\n" not in line and "\r" not in line
        rec = check_line(line, fmt)
        # Exactly what was logged, control and bidi characters as visible escapes.
        assert rec["msg"] == escape(msg) and rec["target"] == escape(attr)
        assert rec["level"] == "warn" and rec["source"] == "app.py:42"


@pytest.mark.unit
def test_fields_as_promslog_writes_them() -> None:
    rec = _record("listening on :9853", level="x")
    rec.created = 1795448551.1099
    line = logs.LogfmtFormatter().format(rec)
    assert line == (
        'ts=2026-11-23T15:42:31.109Z level=warn source=app.py:42 msg="listening on :9853" '
        "logged_level=x"
    )
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("d", logging.CRITICAL, "/x/y.py", 7, "failed", None, sys.exc_info())
    out = json.loads(logs.JSONFormatter().format(rec))
    assert out["level"] == "error" and out["err"].endswith("ValueError: boom")
    assert [logs.level_name(n) for n in (5, 10, 20, 30, 40, 50)] == [
        "debug",
        "debug",
        "info",
        "warn",
        "error",
        "error",
    ]


def _config(path: Path, unbound: Unbound, dead: int, *, timeout: str = "1s") -> None:
    path.write_text(
        f"""
modules:
  m: {{query_name: a.local.test, query_type: A, timeout: {timeout}}}
targets:
  - address: {unbound.address}
    module: m
    labels: {{site: lab}}
    stats: {{type: unbound, control: "unix://{unbound.control_socket}"}}
  - address: 127.0.0.1:{dead}
    module: m
    labels: {{site: lab}}
resolv_conf: []
"""
    )


def _wait_for(exp: ExporterProcess, log: Path, text: str) -> None:
    deadline = time.monotonic() + 30
    while text not in log.read_text(errors="replace"):
        assert exp.proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"{text!r} not logged:\n{log.read_text()}"
        time.sleep(0.05)


@pytest.mark.integration
@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_every_line_of_a_run_parses(fmt: str, tmp_path: Path) -> None:
    unbound = Unbound(tmp_path / "unbound", local_data=["a.local.test. 300 IN A 192.0.2.1"])
    unbound.start()
    try:
        dead = free_port()  # nothing listens: the probe fails with "refused"
        cfg = tmp_path / "dnsfleet.yml"
        _config(cfg, unbound, dead)
        exp = ExporterProcess(
            f"--config.file={cfg}", "--log.level=debug", f"--log.format={fmt}", cwd=tmp_path
        )
        log = tmp_path / "exporter.log"
        try:
            for _ in range(2):
                got = samples(exp.get("/metrics"))
                assert matching(got, "dnsfleet_probe_success", target=unbound.address) == 1
                assert matching(got, "dnsfleet_probe_success", target=f"127.0.0.1:{dead}") == 0
            _config(cfg, unbound, dead, timeout="2s")
            exp.hup()
            _wait_for(exp, log, "configuration loaded")
            # A message with quotes, a colon and a path: quoting has work to do.
            cfg.write_text('modules:\n  m: {timeout: "fa st"}\n')
            exp.hup()
            _wait_for(exp, log, "reload failed")
            assert value(exp.get("/metrics"), "dnsfleet_config_last_reload_successful") == 0
        finally:
            exp.stop()
        assert exp.proc.returncode == 0
    finally:
        unbound.stop()

    lines = log.read_text().splitlines()
    recs = [check_line(line, fmt) for line in lines]
    by_msg = {r["msg"]: r for r in recs}

    def one(prefix: str) -> dict[str, Any]:
        (r,) = [r for m, r in by_msg.items() if m.startswith(prefix)]
        return r

    assert one("dnsfleet-exporter ")["level"] == "info"
    assert "listening on http://127.0.0.1:" in one("dnsfleet-exporter ")["msg"]
    failed = one(f"probe 127.0.0.1:{dead} (m) failed: refused")
    assert failed["level"] == "debug" and failed["source"].startswith("prober.py:")
    assert one("configuration loaded from ")["level"] == "info"
    bad = one("reload failed, keeping the running configuration: ")
    assert bad["level"] == "error" and '"fa st"' in bad["msg"]
    assert one("shutting down")["level"] == "info"
    assert recs[-1]["msg"] == "shutting down"
    assert all(r["ts"] <= s["ts"] for r, s in itertools.pairwise(recs))
    assert exp.proc.returncode == 0 and not [ln for ln in lines if "Traceback" in ln]


@pytest.mark.integration
@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_startup_error_is_a_log_line_too(fmt: str, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yml"
    cfg.write_text("targets: 1\n")
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet", f"--config.file={cfg}", f"--log.format={fmt}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    rec = check_line(line, fmt)
    assert rec["level"] == "error" and rec["msg"].startswith(f"configuration invalid: {cfg}")
