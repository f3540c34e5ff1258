"""The documentation against the code: every metric family the exporter emits is in
docs/metrics.md and nothing there is emitted nowhere, every runbook is some alert's
runbook, every relative link resolves, and README.md stays a front door.

Runbook URLs resolving and runbook sections are checked with the alert conventions in
tests/test_alerts.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from dnsfleet.probes.reasons import REASONS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINKED_DOCS = [ROOT / "README.md", ROOT / "alerts" / "README.md", *DOCS]
RUNBOOKS = ROOT / "alerts" / "runbooks"
README_MAX_LINES = 300

# A family name written whole as a string of the code (not a prefix, not inside a sentence).
WHOLE_FAMILY = re.compile(r"dnsfleet_[a-z0-9_]*[a-z0-9]")
# A documented family is the first cell of a table row in docs/metrics.md.
DOCUMENTED = re.compile(r"^\| `(dnsfleet_[a-z0-9_]+)` \|", re.MULTILINE)
DOCUMENTED_TYPE = re.compile(r"^\| `(dnsfleet_[a-z0-9_]+)` \| ([a-z]+) \|", re.MULTILINE)
TYPE_LINE = re.compile(r"^# TYPE (dnsfleet_[a-z0-9_]+) ([a-z]+)$", re.MULTILINE)
# [text](target): a target without a scheme is a path relative to the document.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def emitted_families() -> set[str]:
    """Names the exporter's code writes whole, as a string of its own (`Family("dnsfleet_x",
    ...)`, a row of a family table): a name only mentioned in a help text, a docstring or a
    comment is not emitted."""
    names: set[str] = set()
    for f in (ROOT / "exporter" / "dnsfleet").rglob("*.py"):
        names.update(
            node.value
            for node in ast.walk(ast.parse(f.read_text()))
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and WHOLE_FAMILY.fullmatch(node.value)
        )
    for f in (ROOT / "tests").rglob("*.golden.prom"):
        names.update(name for name, _ in TYPE_LINE.findall(f.read_text()))
    return names


def documented_families() -> list[str]:
    return DOCUMENTED.findall((ROOT / "docs" / "metrics.md").read_text())


def test_every_emitted_family_is_documented() -> None:
    missing = emitted_families() - set(documented_families())
    assert not missing, f"families missing from docs/metrics.md: {sorted(missing)}"


def test_nothing_documented_that_is_not_emitted() -> None:
    extra = set(documented_families()) - emitted_families()
    assert not extra, f"docs/metrics.md documents families nothing emits: {sorted(extra)}"


def test_each_family_documented_once() -> None:
    names = documented_families()
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"documented more than once in docs/metrics.md: {twice}"


def test_documented_types_match_golden_expositions() -> None:
    documented = dict(DOCUMENTED_TYPE.findall((ROOT / "docs" / "metrics.md").read_text()))
    problems = sorted(
        f"{name}: {kind} in {f.relative_to(ROOT)}, {documented.get(name)} in docs/metrics.md"
        for f in (ROOT / "tests").rglob("*.golden.prom")
        for name, kind in TYPE_LINE.findall(f.read_text())
        if documented.get(name) != kind
    )
    assert not problems, "\n".join(problems)


def test_golden_expositions_are_read() -> None:
    """The family check above reads the golden files; make sure there are some."""
    assert list((ROOT / "tests").rglob("*.golden.prom"))


def test_every_runbook_belongs_to_an_alert() -> None:
    urls: set[str] = set()
    for f in sorted((ROOT / "alerts" / "rules").glob("*.yml")):
        for group in yaml.safe_load(f.read_text())["groups"]:
            urls.update(r["annotations"]["runbook_url"] for r in group["rules"] if "alert" in r)
    referenced = {u.rsplit("/", 1)[1] for u in urls}
    orphans = sorted(p.name for p in RUNBOOKS.glob("*.md") if p.name not in referenced)
    assert not orphans, f"runbooks no alert links to: {orphans}"


def relative_links(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    broken: list[str] = []
    for target in relative_links(doc):
        path = (doc.parent / target).resolve()
        if not path.exists():
            broken.append(
                path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            )
    assert not broken, f"{doc.relative_to(ROOT)}: links to missing files: {broken}"


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; keep it under {README_MAX_LINES} and move detail to docs/"
    )


def test_docs_do_not_point_outside_the_repository() -> None:
    """Documentation and code comments cite public sources, never a file kept outside the
    repository."""
    code = sorted((ROOT / "exporter").rglob("*.py"))
    problems = [
        f"{d.relative_to(ROOT)}: {m}"
        for d in [*LINKED_DOCS, *code]
        for m in re.findall(r"shared/[A-Z]+\.md", d.read_text())
    ]
    assert not problems, problems


def test_readme_explains_every_failure_reason() -> None:
    """The README's table of failure reasons names every member of the closed set."""
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", (ROOT / "README.md").read_text(), re.M))
    assert {str(r) for r in REASONS} <= rows
