"""Metric families and the Prometheus text exposition (format 0.0.4).

Collectors build :class:`Family` objects fresh on every scrape (client_python's custom
collector pattern) and :func:`render` writes them. We render ourselves rather than through
``prometheus_client.generate_latest`` because a /metrics scrape of 1,000 targets carries
~35,000 samples: label strings are escaped once per target (``labelset``) and reused, which
keeps exposition to a few milliseconds. Tests read the output back with client_python's
parser and ``promtool check metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram", "untyped"]


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labelset(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """Render labels once: ``a="1",b="2"`` (no braces). Empty string for no labels."""
    items = labels.items() if isinstance(labels, Mapping) else labels
    return ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in items)


def join_labels(*parts: str) -> str:
    return ",".join(p for p in parts if p)


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


@dataclass(slots=True)
class Family:
    """One metric family. ``name`` is the full sample name (counters end in ``_total``)."""

    name: str
    help: str
    type: MetricType = "gauge"
    # (suffix, pre-rendered labels, value)
    samples: list[tuple[str, str, float]] = field(default_factory=list)

    def add(self, value: float, labels: Mapping[str, str] | None = None) -> Family:
        self.samples.append(("", labelset(labels) if labels else "", value))
        return self

    def add_raw(self, labels: str, value: float, suffix: str = "") -> None:
        """Add a sample whose labels were rendered with :func:`labelset` beforehand."""
        self.samples.append((suffix, labels, value))

    def value(self, labels: Mapping[str, str] | None = None, suffix: str = "") -> float | None:
        """Look a sample up (tests and derived metrics)."""
        want = labelset(labels) if labels else ""
        for s, lab, v in self.samples:
            if s == suffix and lab == want:
                return v
        return None


@dataclass(slots=True)
class TextFamily:
    """A family whose sample lines are already rendered. The per-target probe families of a
    1,000-target scrape use it: building 35,000 sample tuples first doubled peak memory."""

    name: str
    help: str
    type: MetricType
    lines: str  # complete sample lines, each ending in a newline

    @property
    def samples(self) -> str:
        return self.lines


def _head(fam: Family | TextFamily) -> str:
    helptext = fam.help.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {fam.name} {helptext}\n# TYPE {fam.name} {fam.type}\n"


def _render_one(fam: Family | TextFamily) -> str:
    name = fam.name
    head = _head(fam)
    if isinstance(fam, TextFamily):
        return head + fam.lines
    out = [head]
    append = out.append
    for suffix, labels, value in fam.samples:
        v = format_value(value)
        if labels:
            append(f"{name}{suffix}{{{labels}}} {v}\n")
        else:
            append(f"{name}{suffix} {v}\n")
    return "".join(out)


def render(families: Iterable[Family | TextFamily]) -> str:
    return "".join(_render_one(f) for f in families if f.samples)


def render_bytes(families: Iterable[Family | TextFamily]) -> bytes:
    """Like :func:`render`, encoding family by family so a large exposition never exists
    as one str and one bytes copy at once; a pre-rendered family's lines are encoded as
    they are, not first copied behind their HELP and TYPE lines."""
    parts: list[bytes] = []
    for f in families:
        if not f.samples:
            continue
        if isinstance(f, TextFamily):
            parts.append(_head(f).encode())
            parts.append(f.lines.encode())
        else:
            parts.append(_render_one(f).encode())
    return b"".join(parts)


OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def _om_head(fam: Family | TextFamily) -> str:
    # OpenMetrics names a counter family without its `_total` sample suffix, calls untyped
    # `unknown`, and escapes quotes in HELP as well (OpenMetrics 1.0, "Text format").
    name = fam.name
    if fam.type == "counter" and name.endswith("_total"):
        name = name[: -len("_total")]
    kind = "unknown" if fam.type == "untyped" else fam.type
    helptext = fam.help.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return f"# TYPE {name} {kind}\n# HELP {name} {helptext}\n"


def render_openmetrics_bytes(families: Iterable[Family | TextFamily]) -> bytes:
    """The same families in the OpenMetrics text format, ``# EOF`` last (what
    prometheus_client serves when Prometheus asks for application/openmetrics-text)."""
    out = []
    for fam in families:
        if not fam.samples:
            continue
        text = _render_one(fam)
        body = text[text.index("\n", text.index("# TYPE")) + 1 :]
        out.append((_om_head(fam) + body).encode())
    out.append(b"# EOF\n")
    return b"".join(out)


class FamilyConflict(ValueError):
    """Two producers emit one family name with different types or help, or the same series:
    the exposition would be wrong, so the programming error is raised (client_python's
    registry raises on a duplicated name in the same way)."""


def merge(families: Iterable[Family]) -> list[Family]:
    """Merge families of the same name (several sources may emit one family); refuse two of
    one name whose type or help differ, or that carry the same series."""
    by_name: dict[str, Family] = {}
    for fam in families:
        have = by_name.get(fam.name)
        if have is None:
            by_name[fam.name] = Family(fam.name, fam.help, fam.type, list(fam.samples))
            continue
        if (have.type, have.help) != (fam.type, fam.help):
            raise FamilyConflict(
                f"family {fam.name} emitted as {have.type} ({have.help!r}) and as "
                f"{fam.type} ({fam.help!r})"
            )
        seen = {(suffix, labels) for suffix, labels, _ in have.samples}
        for suffix, labels, _ in fam.samples:
            if (suffix, labels) in seen:
                raise FamilyConflict(f"duplicated series {fam.name}{suffix}{{{labels}}}")
        have.samples.extend(fam.samples)
    return list(by_name.values())
