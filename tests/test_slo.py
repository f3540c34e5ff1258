"""The rule generator (alerts/generate.py) and its input, alerts/config.yml: the committed
rules are what the committed parameters give; the runbook base URL reaches every alert of
every rule file, hand-written ones included; a new SLI source is one entry; bad parameters
are refused with the key that is wrong. The SLO rules' behaviour is proven by promtool in
alerts/tests/slo*.test.yml (tests/test_alerts.py runs them) and end to end by
tests/test_slo_fullstack.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from alerts import generate

from tests.harness.tools import binary

CONFIG = generate.CONFIG
RULES = generate.RULES


def config_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    return doc


@pytest.mark.unit
def test_committed_rules_are_what_the_config_generates() -> None:
    assert generate.main(["--check"]) == 0, "run `make alerts`"
    files = generate.generate(generate.load_config(CONFIG), RULES, RULES)
    on_disk = {p.name for p in RULES.glob("*.rules.yml")}
    assert set(files) == on_disk


@pytest.mark.unit
def test_check_mode_detects_drift(tmp_path: Path) -> None:
    for p in RULES.glob("*.yml"):
        (tmp_path / p.name).write_text(p.read_text())
    assert generate.main(["--check", "--rules", str(tmp_path)]) == 0
    slo = tmp_path / generate.SLO_FILE
    slo.write_text(slo.read_text().replace("14.4 * 0.001", "20 * 0.001"))
    assert generate.main(["--check", "--rules", str(tmp_path)]) == 1
    assert generate.main(["--rules", str(tmp_path)]) == 0  # regenerated
    assert generate.main(["--check", "--rules", str(tmp_path)]) == 0


@pytest.mark.unit
def test_runbook_base_url_reaches_every_alert_of_every_file(tmp_path: Path) -> None:
    doc = config_doc()
    doc["runbook_base_url"] = "https://wiki.example.net/dns/runbooks/"
    cfg = tmp_path / "config.yml"
    cfg.write_text(yaml.safe_dump(doc))
    out = tmp_path / "rules"
    assert generate.main(["--config", str(cfg), "--out", str(out)]) == 0
    seen = 0
    for path in sorted(out.glob("*.rules.yml")):
        if path.name != generate.SLO_FILE:  # hand-written: only the links change
            original = (RULES / path.name).read_text().splitlines()
            rewritten = path.read_text().splitlines()
            assert len(original) == len(rewritten), path.name
            for before, after in zip(original, rewritten, strict=True):
                if before != after:
                    assert before.strip().startswith("runbook_url:"), (path.name, before)
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    url = rule["annotations"]["runbook_url"]
                    assert url == f"https://wiki.example.net/dns/runbooks/{rule['alert']}.md"
                    seen += 1
    assert seen >= 40


@pytest.mark.unit
def test_set_runbook_urls_is_line_exact() -> None:
    text = (
        "groups:\n  - name: g\n    rules:\n      # a comment\n      - alert: A\n"
        "        expr: x > 0\n        annotations:\n          runbook_url: http://old/A.md\n"
        "      - record: r\n        expr: y\n"
    )
    out = generate.set_runbook_urls(text, "https://new/")
    assert out == text.replace("http://old/A.md", "https://new/A.md")
    with pytest.raises(generate.ConfigError, match="without a runbook_url"):
        generate.set_runbook_urls("      - alert: B\n        expr: x\n", "https://new/")


@pytest.mark.integration
def test_a_new_sli_source_is_one_entry(tmp_path: Path) -> None:
    """An event-based source (as the shipped dnstap one is): one entry under the SLO
    gets its ratios over every window, the fleet mean, the budget and the burn-rate
    alerts, which select on the SLO, not on a list of sources."""
    doc = config_doc()
    doc["slos"][0]["sources"].append(
        {
            "name": "another",
            "selector": 'job="dnstap"',
            "errors": 'sum by (site) (rate(dnstap_responses_total{rcode="SERVFAIL", '
            "$selector}[$window]))",
            "total": "sum by (site) (rate(dnstap_responses_total{$selector}[$window]))",
        }
    )
    rules = generate.slo_rules(generate.parse_config(doc))["groups"][0]["rules"]
    mine = [r for r in rules if r.get("labels", {}).get("source") == "another"]
    windows = generate.parse_config(doc).windows()
    assert len(mine) == len(windows)
    assert all("dnstap_responses_total" in r["expr"] for r in mine)
    assert all('job="dnstap"' in r["expr"] for r in mine)
    out = tmp_path / "slo.rules.yml"
    out.write_text(generate.render_slo(generate.parse_config(doc)))
    check = subprocess.run(
        [binary("promtool"), "check", "rules", str(out)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.unit
def test_generated_rules_follow_the_workbook() -> None:
    text = (RULES / generate.SLO_FILE).read_text()
    for long, short, rate in (
        ("1h", "5m", "14.4"),
        ("6h", "30m", "6"),
        ("1d", "2h", "3"),
        ("3d", "6h", "1"),
    ):
        assert re.search(
            rf"ratio_rate{long}\{{slo=\"availability\"\}} > \({rate} \* 0\.001\)\n\s*and on "
            rf"\(site, slo, source\)\n\s*site:dnsfleet_slo_errors:ratio_rate{short}\{{slo="
            rf"\"availability\"\}} > \({rate} \* 0\.001\)",
            text,
        ), (long, short)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=1), r"unknown key\(s\) \['extra'\]"),
        (lambda d: d.update(runbook_base_url="https://x/no-slash"), "must end with '/'"),
        (lambda d: d.update(period="30 days"), "period: '30 days' is not a duration"),
        (lambda d: d["slos"][0].update(objective=1.5), r"slos\[0\].objective: between 0 and 1"),
        (lambda d: d["slos"][1].update(threshold="0.3s"), "not a latency bucket boundary"),
        # A bound the exporter no longer writes: its `le` would match no series.
        (
            lambda d: d["slos"][1].update(threshold="2.5s"),
            r"'2\.5s' is not a latency bucket boundary \(0\.001s, .*, 0\.5s, 1s\)",
        ),
        (
            lambda d: d["burn_rates"][0].update(short="2h"),
            r"burn_rates\[0\]: the short window must be shorter",
        ),
        (
            lambda d: d["slos"][0]["sources"][1].pop("total"),
            r"slos\[0\].sources\[1\]: either `bad`, `ratio`, or `errors` and `total`",
        ),
        (
            lambda d: d["slos"][0]["sources"][3].update(bad="1 - max(x{$selectr})"),
            r"unknown placeholder 'selectr'",
        ),
        (
            lambda d: d["slos"][0]["sources"][1].update(total="sum by (site) (x)"),
            r"rates over \$window",
        ),
        (lambda d: d["slos"][0].update(alert="dns_burn"), "an alert name in CamelCase"),
        (
            lambda d: d["slos"][0]["sources"][0].update(bad="1 - max(x)"),
            r"slos\[0\].sources\[0\]: either `bad`, `ratio`, or `errors` and `total`",
        ),
        (
            lambda d: d["slos"][0]["sources"][0].update(ratio="min by (site) (x)"),
            r"are rates over \$window",
        ),
    ],
)
def test_bad_parameters_are_refused(change: Any, message: str, tmp_path: Path) -> None:
    doc = config_doc()
    change(doc)
    cfg = tmp_path / "config.yml"
    cfg.write_text(yaml.safe_dump(doc))
    with pytest.raises(generate.ConfigError, match=message):
        generate.load_config(cfg)
    assert generate.main(["--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
