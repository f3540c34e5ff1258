"""The paging scenarios of test_slo_scenarios.py on the other engines, at Prometheus'
default evaluation interval (1 m): the same rules on Prometheus 3's promtool (classic
histogram `le` labels and range selectors' left-open windows change there), and the rules
Sloth generates from alerts/sloth, which must agree with dnsfleet's own on what pages and
what opens a ticket. That the verdicts do not depend on the evaluation interval is shown
on Debian's promtool at 15 s, 30 s and 1 m (test_slo_scenarios.py); here each engine runs
once per scenario, the longest scenario (three days at 15 s) costing minutes per run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from alerts import generate

from tests.harness.gotools import prometheus3_tool, sloth
from tests.harness.tools import binary
from tests.test_slo_scenarios import SCENARIOS, our_rules, promtool_test

pytestmark = pytest.mark.integration

INTERVAL = "1m"


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return our_rules(tmp_path_factory)


# promtool's own 900 s is the hang guard, as in test_slo_scenarios: the suite's 300 s cut
# the three days of the lost-probe scenario short on a busy machine.
@pytest.mark.timeout(960)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_dnsfleet_rules_on_prometheus_3(name: str, ours: list[Path], tmp_path: Path) -> None:
    promtool_test(prometheus3_tool("promtool"), ours, SCENARIOS[name](), INTERVAL, tmp_path)


@pytest.fixture(scope="module")
def sloth_rules(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """`sloth validate` accepts alerts/sloth; `sloth generate` makes its rules."""
    tool = sloth()
    out = subprocess.run(
        [tool, "validate", "-i", str(generate.SLOTH)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    work = tmp_path_factory.mktemp("sloth")
    rules = []
    for spec in sorted(generate.SLOTH.glob("*.yml")):
        target = work / f"{spec.stem}.rules.yml"
        gen = subprocess.run(
            [tool, "generate", "-i", str(spec), "-o", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert gen.returncode == 0, gen.stdout + gen.stderr
        rules.append(target)
    return rules


@pytest.mark.timeout(960)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sloth_rules_agree(name: str, sloth_rules: list[Path], tmp_path: Path) -> None:
    """Sloth's rules from the same specs give the same pages and tickets. (Sloth averages
    its 5-minute ratios for the long windows; on these steady inputs that is the same.)"""
    promtool_test(binary("promtool"), sloth_rules, SCENARIOS[name](), INTERVAL, tmp_path)
