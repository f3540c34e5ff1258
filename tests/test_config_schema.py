"""The JSON Schema of dnsfleet.yml (docs/dnsfleet.schema.json) and /config's YAML are both
derived from the config dataclasses: the committed schema is the generated one, it accepts
every example the loader accepts, refuses the same unknown keys, and /config's output loads
back to the same configuration with its secrets redacted."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from dnsfleet import config
from dnsfleet.config import schema
from dnsfleet.config.checks import yaml_keys

ROOT = Path(__file__).parent.parent
CONFIGS = Path(__file__).parent / "configs"
SCHEMA_FILE = ROOT / "docs" / "dnsfleet.schema.json"
VALID = [*sorted(CONFIGS.glob("valid*.yml")), ROOT / "compose" / "dnsfleet" / "dnsfleet.yml"]
FULL = CONFIGS / "valid-full.yml"
# Invalid examples whose problem is a rule only the loader knows: across keys, or a check
# (an IP literal, a DNS name, a regex, a known type) JSON Schema cannot express plainly.
LOADER_ONLY = {
    "bad-cidr",
    "dnssec-bogus-valid-rcodes",
    "dnssec-without-edns",
    "bad-port",
    "bad-query-name",
    "bad-regex",
    "duplicate-target",
    "duplicate-target-default-port",
    "duplicate-target-ipv6",
    "dnstap-identity-names-no-target",
    "dnstap-identity-other-port",
    "dnstap-search-suffix-twice",  # the same name in another case
    "hostname-target",
    "missing-module",
    "negative-duration",
    "unknown-query-type",
    "unknown-rcode",
    "zone-without-nameserver",
    "ca-file-not-pem",
    "doh-url-with-tls",
}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    doc = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return jsonschema.Draft202012Validator(doc)


def errors(validator: jsonschema.Draft202012Validator, doc: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.unit
def test_committed_schema_is_generated() -> None:
    """Regenerate with: dnsfleet config-schema > docs/dnsfleet.schema.json"""
    assert SCHEMA_FILE.read_text() == schema.render()


@pytest.mark.integration
def test_cli_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from dnsfleet.cli import main; main()", "config-schema"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == SCHEMA_FILE.read_text()


@pytest.mark.unit
@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_examples_load_and_validate(
    path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    config.load(path)
    assert errors(validator, yaml.safe_load(path.read_text())) == []


def readme_configs() -> list[tuple[str, dict[str, Any]]]:
    """The YAML blocks of README.md and docs/configuration.md that are dnsfleet.yml
    fragments (not the web config), made whole with `targets: []` where they set nothing to
    monitor and the modules their targets name; each with its file and line."""
    known = {k for k, _, _ in yaml_keys(config.Config)}
    out = []
    for path in (ROOT / "README.md", ROOT / "docs" / "configuration.md"):
        text = path.read_text()
        for m in re.finditer(r"```yaml\n(.*?)```", text, re.S):
            doc = yaml.safe_load(m.group(1))
            if isinstance(doc, dict) and doc and set(doc) <= known:
                if not set(doc) & set(config.MONITORING_KEYS):
                    doc["targets"] = []
                # A fragment about targets names modules defined in another fragment.
                if "modules" not in doc and isinstance(doc.get("targets"), list):
                    doc["modules"] = {
                        t["module"]: {"query_name": "www.example.com"}
                        for t in doc["targets"]
                        if "module" in t
                    }
                line = text[: m.start()].count("\n") + 1
                out.append((f"{path.relative_to(ROOT)}:{line}", doc))
    return out


@pytest.mark.unit
def test_readme_examples_load_and_validate(validator: jsonschema.Draft202012Validator) -> None:
    examples = readme_configs()
    assert len(examples) >= 4
    for where, doc in examples:
        config.parse(doc, source=where)
        assert errors(validator, doc) == [], where


@pytest.mark.unit
@pytest.mark.parametrize("path", sorted((CONFIGS / "invalid").glob("*.yml")), ids=lambda p: p.stem)
def test_invalid_examples_fail_the_schema(
    path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        pytest.skip("not YAML: no schema applies")
    if isinstance(doc, dict) and not set(doc) & set(config.MONITORING_KEYS):
        doc["targets"] = []  # fail for the problem the file shows, not for being empty
    found = errors(validator, doc)
    if path.stem in LOADER_ONLY:
        assert found == [], "the schema learnt this one: drop it from LOADER_ONLY"
    else:
        assert found, f"{path.name} passes the schema"


@pytest.mark.unit
def test_schema_refuses_empty_document(validator: jsonschema.Draft202012Validator) -> None:
    assert errors(validator, {}) and errors(validator, {"modules": {}})
    assert errors(validator, {"targets": []}) == []


# Each mapping in valid-full.yml, and where its keys are listed in the schema.
SECTIONS = [
    ((), ()),
    (("modules", "recursive"), ("$defs", "Module")),
    (("targets", 0), ("$defs", "Target")),
    (("targets", 0, "stats"), ("$defs", "StatsSource", "oneOf", 0)),
    (("targets", 1, "stats"), ("$defs", "StatsSource", "oneOf", 2)),
    (("limits",), ("$defs", "Limits")),
    (("host",), ("$defs", "HostConfig")),
    (("resolver",), ("$defs", "ResolverConfig")),
    (("consul",), ("$defs", "ConsulConfig")),
    (("consul", "agents", 0), ("$defs", "ConsulAgent")),
    (("consul", "services", 1), ("$defs", "ConsulService")),
    (("resolv_conf", 1), ("$defs", "ResolvConfWatch")),
]


@pytest.mark.unit
@pytest.mark.parametrize(("where", "schema_path"), SECTIONS, ids=lambda p: ".".join(map(str, p)))
def test_loader_and_schema_know_the_same_keys(
    where: tuple[str | int, ...],
    schema_path: tuple[str | int, ...],
    validator: jsonschema.Draft202012Validator,
) -> None:
    doc = yaml.safe_load(FULL.read_text())
    section = doc
    for k in where:
        section = section[k]
    section["zz_unknown"] = 1
    with pytest.raises(config.ConfigError) as exc:
        config.parse(doc, source="f.yml")
    m = re.search(r"zz_unknown: unknown key \(valid keys: (.*)\)$", str(exc.value))
    assert m, str(exc.value)
    node: Any = schema.json_schema()
    for k in schema_path:
        node = node[k]
    assert node["additionalProperties"] is False
    assert sorted(m.group(1).split(", ")) == sorted(node["properties"])
    assert any("zz_unknown" in e for e in errors(validator, doc))


@pytest.mark.unit
def test_stats_variants_follow_the_type(validator: jsonschema.Draft202012Validator) -> None:
    variants = schema.json_schema()["$defs"]["StatsSource"]["oneOf"]
    kinds = [set(v["properties"]["type"]["enum"]) for v in variants]
    assert kinds == [
        {"unbound"},
        {"bind", "knot-resolver", "coredns"},
        {"pdns-recursor", "dnsdist"},
    ]
    base: dict[str, Any] = {
        "targets": [{"address": "127.0.0.1", "module": "m"}],
        "modules": {"m": {}},
    }
    for stats, ok in [
        ({"type": "unbound"}, False),  # control is required
        ({"type": "bind", "url": "http://127.0.0.1:1"}, True),
        ({"type": "bind", "url": "http://127.0.0.1:1", "api_key": "k"}, False),
        ({"type": "dnsdist", "url": "http://127.0.0.1:1", "api_key": "k"}, True),
        ({"type": "unbound", "control": "unix:///x", "url": "http://x"}, False),
    ]:
        doc = copy.deepcopy(base)
        doc["targets"][0]["stats"] = stats
        assert (errors(validator, doc) == []) is ok, stats


# ------------------------------------------------------------------ /config (to_yaml)


@pytest.mark.unit
def test_effective_config_round_trips(validator: jsonschema.Draft202012Validator) -> None:
    cfg = config.load(FULL)
    text = config.to_yaml(cfg)
    doc = yaml.safe_load(text)
    assert errors(validator, doc) == []
    again = config.parse(doc, source=cfg.source)
    # The API key is the one value /config does not give back.
    pdns = cfg.targets[1]
    assert pdns.stats is not None and pdns.stats.api_key == "s3cret"
    again_targets = list(again.targets)
    again_targets[1] = dataclasses.replace(
        again.targets[1], stats=dataclasses.replace(pdns.stats, api_key="s3cret")
    )
    assert dataclasses.replace(again, targets=tuple(again_targets)) == cfg


@pytest.mark.unit
def test_effective_config_hides_secrets() -> None:
    cfg = config.load(FULL)
    text = config.to_yaml(cfg)
    assert "s3cret" not in text
    assert "api_key: <secret>" in text
    # token_file is a path; the token itself is never in the configuration.
    assert "token_file: /etc/dnsfleet/consul.token" in text


@pytest.mark.unit
def test_every_default_is_in_the_effective_config() -> None:
    text = config.to_yaml(config.load(CONFIGS / "valid.yml"))
    doc = yaml.safe_load(text)
    assert doc["limits"] == {
        "max_concurrent_probes": 64,
        "max_targets": 20000,
        "scrape_timeout_offset": "500ms",
        "default_scrape_timeout": "10s",
    }
    assert doc["modules"]["recursive"]["edns_udp_size"] == 1232
    assert doc["resolv_conf"] == [
        {"path": "/etc/resolv.conf", "query_name": ".", "query_type": "NS", "probe_timeout": "1s"}
    ]
