"""Config held to the standard of a strict loader: label names matched whole,
every label the exporter sets reserved, no NaN or infinity, no duplicate keys, rcodes and
zone ids in range, Go duration syntax, and a fuzz proving that any input gives a Config or
a ConfigError, never anything else."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dnsfleet import config
from dnsfleet.config import RESERVED_LABELS, ConfigError
from dnsfleet.exposition import Labels
from dnsfleet.web import config as webconfig
from tests.harness.metrics import samples
from tests.harness.tools import examples

BASE = "modules:\n  m: {query_name: example.test}\n"


def load_text(tmp_path: Path, text: str) -> config.Config:
    p = tmp_path / "c.yml"
    p.write_text(text)
    return config.load(p)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASE + 'targets: [{address: 127.0.0.1, module: m, labels: {"site\\n": x}}]\n',
            "targets[0].labels.site\\n: invalid label name",  # the newline as an escape
        ),
        (
            BASE + "targets: [{address: 127.0.0.1, module: m, labels: {backend: x}}]\n",
            'targets[0].labels.backend: label "backend" is set by the exporter',
        ),
        (
            BASE + "targets: [{address: 127.0.0.1, module: m, capacity_qps: .nan}]\n",
            "targets[0].capacity_qps: expected a finite number, got nan",
        ),
        (
            BASE + "targets: [{address: 127.0.0.1, module: m, capacity_qps: .inf}]\n",
            "targets[0].capacity_qps: expected a finite number, got inf",
        ),
        (
            "modules:\n  m: {query_name: example.test, timeout: .nan}\ntargets: []\n",
            "modules.m.timeout: invalid duration",
        ),
        ("targets: []\ntargets: [{address: 127.0.0.1}]\n", "duplicate key 'targets'"),
        (
            "modules:\n  m: {query_name: a.test}\n  m: {query_name: b.test}\ntargets: []\n",
            "duplicate key 'm'",
        ),
        (
            'modules:\n  m: {valid_rcodes: ["5000"]}\ntargets: []\n',
            'modules.m.valid_rcodes[0]: unknown rcode "5000"',
        ),
        (
            BASE + 'targets: [{address: "[fe80::1%99999999999]:53", module: m}]\n',
            'zone id "99999999999" out of range',
        ),
    ],
)
def test_refused_with_key_path(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_text(tmp_path, text)
    assert message in str(exc.value), str(exc.value)
    assert str(exc.value).startswith(str(tmp_path / "c.yml"))


@pytest.mark.unit
@pytest.mark.parametrize("label", sorted(RESERVED_LABELS))
def test_every_label_the_exporter_sets_is_reserved(tmp_path: Path, label: str) -> None:
    with pytest.raises(ConfigError, match=r"set by the exporter|invalid label name"):
        load_text(
            tmp_path,
            BASE + f"targets: [{{address: 127.0.0.1, module: m, labels: {{{label}: x}}}}]\n",
        )


@pytest.mark.unit
def test_emitted_label_names_are_all_reserved() -> None:
    """Every label name in the host collectors' golden exposition, the resolver and canary
    families and the probe families is reserved, so no configured label can collide."""
    from dnsfleet.collectors.resolver import stats_families
    from dnsfleet.exposition import render
    from dnsfleet.parsers.promtext import parse_resolver_metrics
    from dnsfleet.parsers.unbound import parse_unbound_stats

    fixtures = Path(__file__).parent / "fixtures"
    texts = [(fixtures / "host" / "x86.golden.prom").read_text()]
    stats = [
        parse_unbound_stats((fixtures / "resolver" / "unbound_stats_noreset.txt").read_text()),
        parse_resolver_metrics(
            "dnsdist", (fixtures / "resolver" / "dnsdist-1.7.metrics.txt").read_text()
        ),
    ]
    texts.append(render(stats_families([(Labels({"target": "t"}), st, None) for st in stats])))
    names = {k for text in texts for _, labels in samples(text) for k, _ in labels}
    assert names - RESERVED_LABELS == set(), sorted(names - RESERVED_LABELS)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m30s", 90.0), ("500us", 0.0005), ("1h2m3.5s", 3723.5), ("250ms", 0.25), ("2s", 2.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert config.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.unit
def test_go_duration_in_a_file(tmp_path: Path) -> None:
    cfg = load_text(tmp_path, "modules:\n  m: {timeout: 1s500ms}\ntargets: []\n")
    assert cfg.modules["m"].timeout == 1.5


@pytest.mark.integration
def test_config_check_prints_no_traceback(tmp_path: Path) -> None:
    p = tmp_path / "c.yml"
    p.write_text("targets: []\ntargets: []\n")
    out = subprocess.run(
        [sys.executable, "-m", "dnsfleet", "--config.check", f"--config.file={p}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr + out.stdout
    assert f"{p}:2:1: invalid YAML: duplicate key 'targets'" in out.stderr + out.stdout
    assert "duplicate key 'targets'" in out.stderr + out.stdout


# ------------------------------------------------------------------------------ fuzzing

KEYS = [
    "modules",
    "targets",
    "limits",
    "host",
    "resolver",
    "probe_allowlist",
    "consul",
    "resolv_conf",
    "address",
    "module",
    "labels",
    "stats",
    "type",
    "control",
    "url",
    "query_name",
    "query_type",
    "timeout",
    "valid_rcodes",
    "canary",
    "capacity_qps",
    "backends",
    "max_targets",
    "agents",
    "services",
    "path",
    "fail_if_matches",
    "m",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.sampled_from(
        [
            "127.0.0.1",
            "::1",
            "[fe80::1%1]:53",
            "m",
            "udp",
            "tcp",
            "A",
            "NOERROR",
            "unbound",
            "bind",
            "dnsdist",
            "unix:///x",
            "1s",
            "(a+)+$",
            "http://127.0.0.1:1/metrics",
            "pool",
            "",
            "%",
            "[::1]:99999",
        ]
    ),
    st.text(max_size=12),
)
TREES = st.recursive(
    SCALARS,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), kids, max_size=5),
    ),
    max_leaves=25,
)


@pytest.mark.unit
@settings(
    derandomize=True,
    max_examples=examples(1500),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.dictionaries(st.sampled_from(KEYS), TREES, max_size=6))
def test_fuzz_any_document_gives_config_or_error(doc: dict[str, object]) -> None:
    with contextlib.suppress(ConfigError):
        config.parse(doc, source="fuzz.yml")


@pytest.mark.unit
@settings(derandomize=True, max_examples=examples(500), deadline=None)
@given(st.text(max_size=200))
def test_fuzz_any_text_gives_config_or_error(text: str) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yml", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        with contextlib.suppress(ConfigError):
            config.load(f.name)


@pytest.mark.unit
def test_yaml_bomb_is_refused(tmp_path: Path) -> None:
    deep = "a: " * 2000 + "1\n"
    with pytest.raises(ConfigError):
        load_text(tmp_path, deep)
    yaml.safe_dump({"x": 1})


# ------------------------------------------------------------- durations need their unit


@pytest.mark.unit
@pytest.mark.parametrize(
    ("value", "hint"),
    [("5", '"5s"'), ("2.5", '"2.5s"'), ('"30"', '"30s"'), ("0.5", '"0.5s"')],
)
def test_a_duration_without_a_unit_is_refused_with_a_hint(
    tmp_path: Path, value: str, hint: str
) -> None:
    """Go's time.ParseDuration refuses "5": is it seconds or milliseconds? So does the
    loader, and it says what was probably meant."""
    p = tmp_path / "c.yml"
    p.write_text(f"modules:\n  m:\n    timeout: {value}\ntargets: []\n")
    with pytest.raises(ConfigError) as e:
        config.load(p)
    assert str(e.value) == (
        f"{p}:3:14: modules.m.timeout: invalid duration "
        f'"{value.strip(chr(34))}": a duration needs a unit (did you mean {hint}? '
        "units: ns, us, ms, s, m, h)"
    )


@pytest.mark.unit
def test_zero_needs_no_unit(tmp_path: Path) -> None:
    """As in Go, "0" is the one duration without a unit."""
    cfg = load_text(tmp_path, "limits: {scrape_timeout_offset: 0}\ntargets: []\n")
    assert cfg.limits.scrape_timeout_offset == 0.0


@pytest.mark.unit
def test_web_config_durations_need_their_unit(tmp_path: Path) -> None:
    p = tmp_path / "web.yml"
    p.write_text("rate_limit:\n  interval: 100\n  burst: 5\n")
    with pytest.raises(ConfigError) as e:
        webconfig.load(p)
    assert str(e.value).startswith(f'{p}:2:13: rate_limit.interval: invalid duration "100": ')
    assert 'did you mean "100s"?' in str(e.value)


@pytest.mark.unit
def test_effective_config_writes_go_durations(tmp_path: Path) -> None:
    cfg = load_text(
        tmp_path,
        "modules:\n  m: {timeout: 1500ms}\nlimits: {scrape_timeout_offset: 0}\ntargets: []\n",
    )
    doc = yaml.safe_load(config.to_yaml(cfg))
    assert doc["modules"]["m"]["timeout"] == "1.5s"
    assert doc["limits"]["scrape_timeout_offset"] == "0s"
    assert config.parse(doc, source=cfg.source) == cfg


# ------------------------------------------------------- every error cites line and column

POSITIONS = """\
modules:
  base: &base
    timeout: 2s
  a: {query_type: AAAA, timeout: 1s}
  b:
    <<: *base
    query_type: MX
targets:
  - address: 127.0.0.1
    module: a
    labels:
      site: ams
"""


@pytest.mark.unit
@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        # a scalar in a flow mapping: the value's column
        ("timeout: 1s}", "timeout: 1x}", "4:34: modules.a.timeout"),
        # a block value
        ("query_type: MX", "query_type: MXX", "7:17: modules.b.query_type"),
        # a merged value: where it is written (the anchor's module reports it first)
        ("    timeout: 2s", "    timeout: 2", "3:14: modules.base.timeout"),
        # a sequence item's key
        ("module: a\n", "module: c\n", "10:13: targets[0].module"),
        # an unknown key: the key itself
        ("    labels:", "    labelz:", "11:5: targets[0].labelz"),
        # a label name: the key
        ("      site: ams", "      si-te: ams", "12:7: targets[0].labels.si-te"),
        # a missing key: the mapping that lacks it
        ("  - address: 127.0.0.1\n", "  - addres: 127.0.0.1\n", "9:5: targets[0]"),
    ],
)
def test_errors_cite_line_and_column(tmp_path: Path, old: str, new: str, where: str) -> None:
    assert old in POSITIONS
    p = tmp_path / "c.yml"
    p.write_text(POSITIONS.replace(old, new))
    with pytest.raises(ConfigError) as e:
        config.load(p)
    assert str(e.value).startswith(f"{p}:{where}: "), str(e.value)


@pytest.mark.unit
def test_a_merged_value_is_found_through_the_merge_key() -> None:
    from dnsfleet.config.locate import find_mark
    from dnsfleet.config.yamlload import compose_yaml

    root = compose_yaml(POSITIONS)
    mark = find_mark(root, ["modules", "b", "timeout"])
    assert mark is not None and (mark.line + 1, mark.column + 1) == (3, 14)
    mark = find_mark(root, ["modules", "b", "query_type"])
    assert mark is not None and (mark.line + 1, mark.column + 1) == (7, 17)
