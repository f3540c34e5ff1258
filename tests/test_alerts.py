"""The alerting suite against real promtool: rules check, unit tests, and the conventions
every alert must follow (severity, static summary, templated description, a runbook that
exists with its four sections, and a promtool test that fires it and one that does not)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.tools import binary

ROOT = Path(__file__).resolve().parent.parent
RULES = sorted((ROOT / "alerts" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*.yml"))
RUNBOOKS = ROOT / "alerts" / "runbooks"
RUNBOOK_BASE = "https://github.com/dnsfleet/dnsfleet/blob/main/alerts/runbooks/"
SEVERITIES = {"critical", "warning", "info"}
SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")


def alerting_rules() -> list[dict]:
    out = []
    for f in RULES:
        for group in yaml.safe_load(f.read_text())["groups"]:
            out.extend(r for r in group["rules"] if "alert" in r)
    return out


def test_rule_files_exist() -> None:
    assert RULES, "no rule files in alerts/rules"


@pytest.mark.parametrize("path", RULES, ids=lambda p: p.name)
def test_promtool_check_rules(path: Path) -> None:
    out = subprocess.run([binary("promtool"), "check", "rules", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(path: Path) -> None:
    out = subprocess.run([binary("promtool"), "test", "rules", path.name],
                         capture_output=True, text=True, timeout=120, cwd=path.parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_alert_conventions() -> None:
    problems = []
    for rule in alerting_rules():
        name = rule["alert"]
        labels = rule.get("labels", {})
        ann = rule.get("annotations", {})
        if labels.get("severity") not in SEVERITIES:
            problems.append(f"{name}: severity {labels.get('severity')!r}")
        if not ann.get("summary") or "{{" in ann["summary"]:
            problems.append(f"{name}: summary must be static text")
        if "{{" not in ann.get("description", ""):
            problems.append(f"{name}: description must be templated")
        url = ann.get("runbook_url", "")
        if not url.startswith(RUNBOOK_BASE):
            problems.append(f"{name}: runbook_url must start with {RUNBOOK_BASE}")
            continue
        book = RUNBOOKS / url.removeprefix(RUNBOOK_BASE)
        if not book.is_file():
            problems.append(f"{name}: runbook {book.name} missing")
            continue
        text = book.read_text()
        problems.extend(f"{name}: runbook lacks {s!r}" for s in SECTIONS if s not in text)
    assert not problems, "\n".join(problems)


def test_every_alert_has_firing_and_quiet_tests() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for f in RULE_TESTS:
        for case in yaml.safe_load(f.read_text()).get("tests", []):
            # promtool's key is `alert_rule_test` (singular); a file using any other key
            # fails `promtool test rules` with "field ... not found".
            for at in case.get("alert_rule_test", []):
                (firing if at.get("exp_alerts") else quiet).add(at["alertname"])
    names = {r["alert"] for r in alerting_rules()}
    assert not names - firing, f"alerts never tested firing: {sorted(names - firing)}"
    assert not names - quiet, f"alerts never tested quiet/pending: {sorted(names - quiet)}"
