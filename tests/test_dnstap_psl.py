"""dnstap insight, registered domains: the Public Suffix List's own conformance cases
against Debian's list, a list of the test's own (normal, wildcard, exception, IDNA rules), the
stated fallback when the file is missing, and hostile names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsfleet.dnstap import psl
from dnsfleet.dnstap.psl import PublicSuffixList, split_labels

# The list's own test cases (CC0), as Debian's `publicsuffix` 20230209.2326-1 ships them in
# /usr/share/doc/publicsuffix/examples/ (copied: images often drop /usr/share/doc); the list
# itself is the package's (tests/needs.txt).
CASES = Path(__file__).parent / "fixtures" / "psl" / "test_psl.txt"
CASE = re.compile(r"^checkPublicSuffix\(('[^']*'|null), ('[^']*'|null)\);", re.MULTILINE)

OWN_LIST = """// a list of the test's own
com
uk
co.uk
*.ck
!www.ck
jp
kawasaki.jp
*.kawasaki.jp
!city.kawasaki.jp
中国
// ===BEGIN PRIVATE DOMAINS===
blogspot.com
"""


@pytest.fixture
def default_path() -> Iterator[None]:
    yield
    psl.configure(psl.DEFAULT_PATH)


def conformance_cases() -> list[tuple[str, str | None]]:
    cases = []
    for m in CASE.finditer(CASES.read_text(encoding="utf-8")):
        name, want = (None if x == "null" else x.strip("'") for x in m.groups())
        if name is not None:
            cases.append((name, want))
    return cases


@pytest.mark.unit
def test_the_lists_own_cases_pass_against_debians_list() -> None:
    """A case whose answer is null is answered with the name itself (it is a public suffix), as
    `registered_domain` documents, except a name with a leading dot, which the list calls
    invalid: its empty first label is a label like any other here (no qname from the wire has
    one), so `.example.com` gives `example.com`."""
    full = psl.load(psl.DEFAULT_PATH)[0]
    cases = conformance_cases()
    assert len(cases) > 60
    failures = []
    for name, want in cases:
        got = full.registered_domain(name)
        expected = want if want is not None else name.lower()
        if name.startswith(".") and want is None:
            expected = full.registered_domain(name[1:]) if name.count(".") > 1 else name
        if got != expected:
            failures.append((name, got, expected))
    assert failures == []


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("www.example.com", "example.com"),
        ("WWW.Example.COM.", "example.com"),
        ("a.b.example.co.uk", "example.co.uk"),
        ("co.uk", "co.uk"),
        ("uk", "uk"),
        ("x.y.z.ck", "y.z.ck"),  # *.ck: z.ck is a suffix
        ("z.ck", "z.ck"),
        ("a.www.ck", "www.ck"),  # !www.ck: www.ck is registered
        ("a.b.city.kawasaki.jp", "city.kawasaki.jp"),
        ("a.b.c.kawasaki.jp", "b.c.kawasaki.jp"),
        ("foo.bar.blogspot.com", "bar.blogspot.com"),
        ("abc.nx.test", "nx.test"),  # unlisted TLD: the implicit rule *
        ("www.食狮.中国", "食狮.中国"),
        ("www.xn--85x722f.xn--fiqs8s", "xn--85x722f.xn--fiqs8s"),  # the same, A-labels
    ],
)
def test_own_list(name: str, want: str) -> None:
    assert PublicSuffixList(OWN_LIST).registered_domain(name) == want


@pytest.mark.unit
def test_missing_file_falls_back_to_last_two_labels(tmp_path: Path, default_path: None) -> None:
    psl.configure(str(tmp_path / "absent.dat"))
    assert psl.registered_domain("a.b.example.co.uk") == "co.uk"
    status = psl.status()
    assert status.source == "fallback" and status.entries == 0
    assert "FileNotFoundError" in status.error
    (tmp_path / "empty.dat").write_text("// nothing\n")
    (tmp_path / "binary.dat").write_bytes(b"\xff\xfe\x00com\n")
    for name in ("empty.dat", "binary.dat"):
        psl.configure(str(tmp_path / name))
        assert psl.status().source == "fallback", name


@pytest.mark.unit
def test_configured_file_is_read_once(tmp_path: Path, default_path: None) -> None:
    path = tmp_path / "list.dat"
    path.write_text(OWN_LIST, encoding="utf-8")
    psl.configure(str(path))
    assert psl.registered_domain("a.b.example.co.uk") == "example.co.uk"
    assert psl.status() == psl.Status("file", str(path), 11)
    path.unlink()  # cached: no second read
    assert psl.registered_domain("x.y.z.ck") == "y.z.ck"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("", ""),
        (".", ""),
        ("com.", "com"),
        ("a\\.b.example.com", "example.com"),
        ("x.example\\.co.uk", "example\\.co.uk"),  # an escaped dot is not a label boundary
        ("a.b\\046c.co.uk", "b\\046c.co.uk"),
        ("a.ex\\\\.co.uk", "ex\\\\.co.uk"),  # an escaped backslash, then a real dot
        ("ünï.cödé.co.uk", "cödé.co.uk"),
        ("a" * 63 + ".co.uk", "a" * 63 + ".co.uk"),
        ("x." * 300 + "example.co.uk", "example.co.uk"),
        ("a..b..co.uk", ".co.uk"),
    ],
)
def test_hostile_names(name: str, want: str) -> None:
    assert PublicSuffixList(OWN_LIST).registered_domain(name) == want


@pytest.mark.unit
def test_escaped_labels_split() -> None:
    assert split_labels("A\\.B.C\\\\.d.") == ["a\\.b", "c\\\\", "d"]
    assert split_labels("trailing\\") == ["trailing\\"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
@pytest.mark.unit
def test_any_text_gives_a_suffix_of_the_name(name: str) -> None:
    """Whatever the text, the answer is its last k labels, k at most the deepest rule + 1."""
    full = psl.default_list()
    labels = split_labels(name)
    got = full.registered_domain(name)
    assert got in {".".join(labels[-k:]) for k in range(1, full.depth + 2)} | {".".join(labels)}
