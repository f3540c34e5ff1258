"""Strict configuration: every invalid file in tests/configs/invalid carries its exact
expected message on its first line (``# error: {file}: key.path: problem``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dnsfleet import config
from dnsfleet.config import ConfigError, parse_address, parse_duration

pytestmark = pytest.mark.unit

CONFIGS = Path(__file__).parent / "configs"
INVALID = sorted((CONFIGS / "invalid").glob("*.yml"))


def expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# error: "), f"{path.name} lacks its '# error:' line"
    return first.removeprefix("# error: ").replace("{file}", str(path))


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_config_exact_message(path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    assert str(exc.value) == expected_message(path)


def test_invalid_cases_cover_every_kind_of_mistake() -> None:
    names = {p.stem for p in INVALID}
    assert {
        "unknown-top-key",
        "unknown-module-key",
        "bad-duration",
        "unknown-query-type",
        "missing-module",
    } <= names


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^/nonexistent/dnsfleet\.yml: cannot read: "):
        config.load("/nonexistent/dnsfleet.yml")
    d = tmp_path / "dir.yml"
    d.mkdir()
    with pytest.raises(ConfigError, match=r"dir\.yml: not a regular file \(a directory\)"):
        config.load(d)
    if os.geteuid() != 0:  # root reads anything
        p = tmp_path / "secret.yml"
        p.write_text("modules: {}")
        p.chmod(0)
        with pytest.raises(ConfigError, match="Permission denied"):
            config.load(p)


def test_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "latin1.yml"
    p.write_bytes(b"modules: {caf\xe9: {}}")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load(p)


def test_valid_config_defaults_and_values() -> None:
    cfg = config.load(CONFIGS / "valid.yml")
    rec = cfg.modules["recursive"]
    assert (rec.query_name, rec.query_type, rec.transport, rec.timeout) == (".", "NS", "udp", 2.0)
    assert rec.valid_rcode_numbers == {0}
    www = cfg.modules["www_tcp"]
    assert (www.transport, www.timeout, www.min_answers) == ("tcp", 0.5, 1)
    t0, t1, t2 = cfg.targets
    assert (t0.host, t0.port, t0.labels) == ("127.0.0.1", 53, (("site", "fra1"),))
    assert (t1.host, t1.port, t1.family.name) == ("::1", 5353, "AF_INET6")
    assert (t2.host, t2.port) == ("127.0.0.2", 53)
    assert cfg.limits.max_concurrent_probes == 64
    assert [str(n) for n in cfg.probe_allowlist] == ["127.0.0.0/8", "::1/128"]
    # The effective config round-trips through its own YAML.
    text = config.to_yaml(cfg)
    assert "max_concurrent_probes: 64" in text and "www.example.test" in text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the file is empty"),
        ("# all commented out\n", "the file is empty"),
        ("targets:\n", "nothing to monitor"),  # cut short after the key
        ("modules:\n  m: {}\n", "nothing to monitor"),
        ("limits: {max_targets: 10}\nresolv_conf:\n", "nothing to monitor"),
    ],
)
def test_config_that_monitors_nothing_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    """An empty or truncated file would make every probe series vanish, and with them every
    alert that could say so: it is refused, naming the file."""
    p = tmp_path / "empty.yml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        config.load(p)
    assert str(exc.value) == (
        f"{p}: {problem}: it has no targets, resolv_conf, consul, zones, dnstap, pod_view or "
        "nodelocal section (write `targets: []` to run only the host collectors on purpose)"
    )


@pytest.mark.parametrize(
    "text", ["targets: []\n", "resolv_conf: []\n", "consul: {agents: []}\n", "nodelocal: {}\n"]
)
def test_explicitly_empty_config_is_accepted(tmp_path: Path, text: str) -> None:
    p = tmp_path / "hostonly.yml"
    p.write_text(text)
    cfg = config.load(p)
    assert cfg.targets == ()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("127.0.0.1", ("127.0.0.1", 53, 0)),
        ("127.0.0.1:5353", ("127.0.0.1", 5353, 0)),
        ("::1", ("::1", 53, 0)),
        ("[::1]:5353", ("::1", 5353, 0)),
        ("[fe80::1%1]:53", ("fe80::1", 53, 1)),
        ("2001:db8::1", ("2001:db8::1", 53, 0)),
    ],
)
def test_parse_address(text: str, want: tuple[str, int, int]) -> None:
    assert parse_address(text) == want


@pytest.mark.parametrize(
    "text",
    [
        "",
        "localhost",
        "[::1",
        "[::1]x",
        "1.2.3.4:0",
        "1.2.3.4:x",
        "1.2.3.4%eth0",
        "1.2.3.4:5\u00b3",
        "1.2.3.4:\u0665\u0663",
    ],
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_address(text)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1.5m", 90.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("-1s", -1.0),  # parsed as Go does; the key's minimum refuses it
        ("+2s", 2.0),
        ("0", 0.0),
        (0, 0.0),
        (3, None),  # no unit: seconds or milliseconds? (did you mean "3s"?)
        ("2", None),
        (2.5, None),
        ("1d", None),  # not a Go unit
        ("1s2", None),
        ("x", None),
        ("", None),
        ("-", None),
        (True, None),
        (None, None),
    ],
)
def test_parse_duration(value: object, seconds: float | None) -> None:
    assert parse_duration(value) == seconds


def test_builtin_default_skips_garbage_nameservers() -> None:
    cfg = config.builtin_default(["127.0.0.53", "not-an-ip", "::1"])
    assert [t.address for t in cfg.targets] == ["127.0.0.53", "::1"]
    assert cfg.source == config.BUILTIN_SOURCE
