"""The conntrack collector: the nf_conntrack statistics of three kernel layouts parsed by
their header, the collector on fixture trees (absent files are no data, a garbled or
unreadable one fails this collector only), its golden exposition checked with promtool,
and this machine's own /proc."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.config import parse
from dnsfleet.exposition import Family, render
from dnsfleet.hostfs import HostFS, StrPath
from dnsfleet.parsers.conntrack import parse_conntrack_stat, parse_sysctl_count
from tests.harness import metrics
from tests.harness.hosttree import FIXTURES, held_reads_fail_once_removed, host_fs
from tests.harness.metrics import of, promtool_check

OWN = FIXTURES / "conntrack"
GOLDEN = OWN / "4.9-4cpu.golden.prom"
STAT = "proc/net/stat/nf_conntrack"
COUNT = "proc/sys/net/netfilter/nf_conntrack_count"
MAX = "proc/sys/net/netfilter/nf_conntrack_max"


def collect(fs: HostFS) -> list[Family]:
    cfg = parse({"targets": []}, source="test")

    async def run() -> list[Family]:
        ctx = CollectContext(
            fs=fs, config=cfg, deadline=asyncio.get_running_loop().time() + 30, state={}
        )
        return await run_collectors(ctx, {"conntrack": COLLECTORS["conntrack"]})

    return asyncio.run(run())


def value(fams: list[Family], name: str, **labels: str) -> float | None:
    return metrics.value(of(fams), name, **labels)


def conntrack_names(fams: list[Family]) -> set[str]:
    return {n for n, _ in of(fams) if n.startswith("dnsfleet_conntrack_")}


def make_tree(root: Path, stat: str | None, count: str | None, limit: str | None) -> Path:
    for rel, text in ((STAT, stat), (COUNT, count), (MAX, limit)):
        if text is not None:
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    return root


def fixture_tree(root: Path) -> Path:
    return make_tree(root, (OWN / "stat-4.9-4cpu.txt").read_text(), "7994\n", "262144\n")


# ------------------------------------------------------------------ parser


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "want"),
    [
        # Linux 4.9: no search_restart, a space before each newline; one CPU's
        # insert_failed at 0xffffffff: the sum does not wrap at 32 bits.
        ("stat-4.9-4cpu.txt", (4, 0x1F3A, 5 + 0x11 + 0xFFFFFFFF, 3, 7)),
        # This machine (Linux 6.18): clashres and chainlength where searched and
        # delete_list were.
        ("stat-6.18-2cpu.txt", (2, 0, 0, 0, 0)),
    ],
)
def test_parse_by_header(name: str, want: tuple[int, ...]) -> None:
    st = parse_conntrack_stat((OWN / name).read_text())
    assert (st.cpus, st.entries, st.insert_failed, st.drop, st.early_drop) == want


@pytest.mark.unit
def test_columns_follow_the_header_not_the_position() -> None:
    """A kernel that moved or lacks a column: found by name, or absent, never misread."""
    text = (
        "entries  early_drop insert_failed\n"
        "00000002  0000000a 00000001\n"
        "00000002  00000001 00000000\n"
    )
    st = parse_conntrack_stat(text)
    assert (st.entries, st.insert_failed, st.early_drop, st.drop) == (2, 1, 11, None)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("searched found\n00000001 00000002\n", "names no 'entries'"),
        ("entries drop drop\n00000001 00000002 00000003\n", "named twice"),
        ("entries  drop\n00000001\n", "line 2 has 1 fields, the header 2"),
        ("entries  drop\n00000001 0000zz00\n", "line 2 has a field that is not hex"),
        ("entries  drop\n", "no CPU line"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_conntrack_stat(text)


@pytest.mark.unit
def test_sysctl_count() -> None:
    assert parse_sysctl_count((OWN / "max-6.18.txt").read_text(), "max") == 262144
    assert parse_sysctl_count((OWN / "count-6.18.txt").read_text(), "count") >= 0
    with pytest.raises(ValueError, match="nf_conntrack_count: '-1' is not a count"):
        parse_sysctl_count("-1\n", "nf_conntrack_count")


# ------------------------------------------------------------------ collector


@pytest.mark.unit
def test_collector_on_fixture_tree(tmp_path: Path) -> None:
    fams = collect(host_fs(fixture_tree(tmp_path)))
    assert value(fams, "dnsfleet_collector_success", collector="conntrack") == 1
    assert value(fams, "dnsfleet_conntrack_insert_failed_total") == 5 + 0x11 + 0xFFFFFFFF
    assert value(fams, "dnsfleet_conntrack_drops_total") == 3
    assert value(fams, "dnsfleet_conntrack_early_drops_total") == 7
    # The sysctl, not the stat file's entries column (read at another moment).
    assert value(fams, "dnsfleet_conntrack_entries") == 7994
    assert value(fams, "dnsfleet_conntrack_entries_limit") == 262144


@pytest.mark.unit
def test_module_not_loaded_is_no_data(tmp_path: Path) -> None:
    fams = collect(host_fs(tmp_path))
    assert value(fams, "dnsfleet_collector_success", collector="conntrack") == 1
    assert conntrack_names(fams) == set()


@pytest.mark.unit
def test_stat_without_sysctls_takes_entries_from_the_stat(tmp_path: Path) -> None:
    root = make_tree(tmp_path, (OWN / "stat-4.9-4cpu.txt").read_text(), None, None)
    fams = collect(host_fs(root))
    assert value(fams, "dnsfleet_conntrack_entries") == 0x1F3A
    assert value(fams, "dnsfleet_conntrack_entries_limit") is None


@pytest.mark.unit
@pytest.mark.parametrize("rel", [STAT, COUNT, MAX])
def test_garbled_or_unreadable_fails_the_collector_only(tmp_path: Path, rel: str) -> None:
    garbled = fixture_tree(tmp_path / "garbled")
    (garbled / rel).write_text("entries\nnot hex\n" if rel == STAT else "lots\n")
    unreadable = fixture_tree(tmp_path / "unreadable")
    (unreadable / rel).unlink()
    (unreadable / rel).mkdir()  # unreadable even for root: EISDIR
    for root in (garbled, unreadable):
        fams = collect(host_fs(root))
        assert value(fams, "dnsfleet_collector_success", collector="conntrack") == 0
        assert conntrack_names(fams) == set(), "no partial data"


@pytest.mark.unit
def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES as a non-root exporter would see it, simulated at open (we run as root)."""
    root = fixture_tree(tmp_path)
    real = os.open

    def denied(path: StrPath, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if Path(path).name == "nf_conntrack":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", denied)
    fams = collect(host_fs(root))
    assert value(fams, "dnsfleet_collector_success", collector="conntrack") == 0


@pytest.mark.unit
def test_counts_and_the_module_unloaded_and_loaded_show_at_the_next_scrape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are held open between scrapes and what they say now is what is read."""
    root = fixture_tree(tmp_path)
    fs = host_fs(root)
    assert value(collect(fs), "dnsfleet_conntrack_entries") == 7994
    (root / COUNT).write_text("8000\n")
    (root / MAX).write_text("524288\n")
    fams = collect(fs)
    assert value(fams, "dnsfleet_conntrack_entries") == 8000
    assert value(fams, "dnsfleet_conntrack_entries_limit") == 524288
    # rmmod nf_conntrack: the entries go, and their held descriptors' reads fail.
    held_reads_fail_once_removed(monkeypatch, errno.EIO)
    for rel in (STAT, COUNT, MAX):
        (root / rel).unlink()
    fams = collect(fs)
    assert conntrack_names(fams) == set()
    assert value(fams, "dnsfleet_collector_success", collector="conntrack") == 1
    fixture_tree(root)  # modprobe nf_conntrack
    assert value(collect(fs), "dnsfleet_conntrack_entries") == 7994


@pytest.mark.integration
def test_golden_exposition(tmp_path: Path) -> None:
    fams = collect(host_fs(fixture_tree(tmp_path)))
    text = render([f for f in fams if f.name.startswith("dnsfleet_conntrack")])
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "rerun with UPDATE_GOLDEN=1 after an intended change"
    out = promtool_check(text)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/net/stat/nf_conntrack").exists(), reason="no nf_conntrack")
def test_this_machine() -> None:
    """The real /proc of this machine, through the same door (a copy of the three files
    would be the fixture test again)."""
    fams = collect(HostFS())
    assert value(fams, "dnsfleet_collector_success", collector="conntrack") == 1
    assert (value(fams, "dnsfleet_conntrack_entries_limit") or 0) > 0
    assert value(fams, "dnsfleet_conntrack_insert_failed_total") is not None
