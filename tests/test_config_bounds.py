"""What one configuration file may ask of the loader: nesting and
alias expansion are bounded before anything recurses, values in messages are cut short,
and only a regular file of bounded size is read. The same reader serves dnsfleet.yml and
the web configuration file."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from dnsfleet import config
from dnsfleet.config import ConfigError
from dnsfleet.config.files import MAX_FILE_BYTES
from dnsfleet.config.values import MAX_PREVIEW
from dnsfleet.config.yamlload import MAX_YAML_DEPTH, MAX_YAML_NODES, load_yaml
from dnsfleet.web import config as webconfig

pytestmark = pytest.mark.unit

LOADERS = [config.load, webconfig.load]


def anchors(levels: int) -> str:
    """The "billion laughs": each list holds nine aliases of the one before (0.7 kB for
    nine levels, 9^9 values once expanded); the last is ``*l{levels - 1}``."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def bomb(levels: int, key: str) -> str:
    return anchors(levels) + f"{key}: *l{levels - 1}\n"


@pytest.mark.parametrize("load", LOADERS, ids=["config", "webconfig"])
def test_deep_nesting_is_refused_at_the_loaders_bound(tmp_path: Path, load: object) -> None:
    """500 levels: within every libyaml's own limit, so the loader's bound refuses, at the
    first level past it."""
    p = tmp_path / "deep.yml"
    p.write_text("targets: " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(ConfigError) as e:
        load(p)  # type: ignore[operator]
    assert str(e.value) == (
        f"{p}:1:{9 + MAX_YAML_DEPTH}: invalid YAML: nested more than {MAX_YAML_DEPTH} levels deep"
    )


# The loader's bound, or libyaml's own (1,000 levels since the libyaml in PyYAML 6.0.3's
# wheels, whose scanner reads a flow collection's tokens ahead and so refuses first),
# whichever comes first: the column says how far it read.
EARLY = re.compile(r"invalid YAML: (nested more than \d+ levels deep|.*maximum nesting depth)")


@pytest.mark.parametrize("load", LOADERS, ids=["config", "webconfig"])
def test_deep_nesting_is_refused_before_the_parser_recurses(tmp_path: Path, load: object) -> None:
    """50,000 levels in 100 kB: libyaml's C composer recursed per level and the process
    died with SIGSEGV (exit 139 on SIGHUP; here it would take pytest with it). Refused
    within the first 1,024 levels, whichever parser refuses, citing file:line:column."""
    p = tmp_path / "deep.yml"
    p.write_text("targets: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError) as e:
        load(p)  # type: ignore[operator]
    m = re.fullmatch(rf"{re.escape(str(p))}:1:(\d+): (.*)", str(e.value))
    assert m and EARLY.fullmatch(m.group(2)), str(e.value)
    assert int(m.group(1)) <= 9 + 1024 + 1


def test_nesting_through_aliases_counts_too() -> None:
    deep = "[" * 40 + "]" * 40
    with pytest.raises(Exception, match="levels deep \\(aliases followed\\)"):
        load_yaml(f"a: &a {deep}\nb: {'[' * 30}*a{']' * 30}\n")
    # Within the bound: an ordinary anchor and merge key still work.
    assert load_yaml("base: &b {timeout: 1s}\nm: {<<: *b, query_type: A}\n") == {
        "base": {"timeout": "1s"},
        "m": {"timeout": "1s", "query_type": "A"},
    }


@pytest.mark.parametrize("load", LOADERS, ids=["config", "webconfig"])
def test_alias_bomb_is_refused_at_load(tmp_path: Path, load: object) -> None:
    """0.7 kB, 9^9 values: --config.check took 18-47 s and 1.25 GB, and as web config it
    froze the server for 37 s (nine levels: 9 minutes, 11 GB)."""
    p = tmp_path / "bomb.yml"
    p.write_text(bomb(9, "targets"))
    assert p.stat().st_size < 1024
    with pytest.raises(ConfigError) as e:
        load(p)  # type: ignore[operator]
    assert re.match(rf"{re.escape(str(p))}:\d+:\d+: invalid YAML: ", str(e.value))
    assert str(e.value).endswith(
        f"more than {MAX_YAML_NODES:,} nodes once aliases are expanded (an alias bomb?)"
    )


def test_values_in_messages_are_cut_short(tmp_path: Path) -> None:
    """Five levels (59,049 values) pass the node bound; the error message used to print
    the whole expanded list (430 kB; six levels, 3.8 MB). Now: its kind, and long strings
    cut."""
    p = tmp_path / "bomb6.yml"
    p.write_text(anchors(5) + "targets: []\nlimits: {scrape_timeout_offset: *l4}\n")
    with pytest.raises(ConfigError) as e:
        config.load(p)
    assert str(e.value) == (
        f"{p}:7:10: limits.scrape_timeout_offset: invalid duration a list "
        "(use a number and a unit: 500ms, 2s, 1m)"
    )
    long = "9" * 100_000 + "s"
    p.write_text(f"targets: []\nlimits: {{scrape_timeout_offset: {long}x}}\n")
    with pytest.raises(ConfigError) as e:
        config.load(p)
    assert len(str(e.value)) < len(str(p)) + 3 * MAX_PREVIEW + 100, len(str(e.value))
    assert "(100002 characters)" in str(e.value)


def test_huge_integer_is_an_error_not_a_crash(tmp_path: Path) -> None:
    """Python refuses int() of more than 4,300 digits with ValueError, which escaped the
    loader as a traceback."""
    p = tmp_path / "bigint.yml"
    p.write_text("targets: []\nlimits: {max_targets: " + "1" * 5000 + "}\n")
    with pytest.raises(ConfigError, match="invalid YAML: Exceeds the limit"):
        config.load(p)


@pytest.mark.parametrize("load", LOADERS, ids=["config", "webconfig"])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, load: object) -> None:
    """open() of a FIFO blocks until a writer comes. The timer below plays that writer if
    the loader blocks (so an old loader fails this test instead of hanging it)."""
    fifo = tmp_path / "dnsfleet.yml"
    os.mkfifo(fifo)

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) if _has_reader(fifo) else -1
        if fd >= 0:
            os.close(fd)

    t = threading.Timer(5.0, writer)
    t.start()
    try:
        with pytest.raises(ConfigError) as e:
            load(fifo)  # type: ignore[operator]
    finally:
        t.cancel()
    assert str(e.value) == f"{fifo}: not a regular file (a FIFO)"


def _has_reader(fifo: Path) -> bool:
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: nobody has it open for reading
        return False
    return True


@pytest.mark.parametrize("load", LOADERS, ids=["config", "webconfig"])
def test_devices_and_oversized_files_are_refused(tmp_path: Path, load: object) -> None:
    """/dev/urandom as the config file was read to 735 MB in 5 s."""
    link = tmp_path / "urandom.yml"
    link.symlink_to("/dev/urandom")
    with pytest.raises(ConfigError) as e:
        load(link)  # type: ignore[operator]
    assert str(e.value) == f"{link}: not a regular file (a character device)"
    big = tmp_path / "big.yml"
    with big.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(ConfigError) as e:
        load(big)  # type: ignore[operator]
    assert str(e.value) == f"{big}: larger than {MAX_FILE_BYTES // 2**20} MiB"
