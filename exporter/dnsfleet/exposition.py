"""Metric families and the Prometheus text exposition (format 0.0.4).

Collectors build :class:`Family` objects fresh on every scrape (client_python's custom
collector pattern) and :func:`render` writes them. A sample is (suffix, :class:`Labels`,
value): the labels stay typed from producer to renderer, and their text is made once per
label set (a target's labels are built once and shared by all its samples), which keeps a
1,000-target /metrics (~35,000 samples) to a few milliseconds where
``prometheus_client.generate_latest`` escapes every sample's labels again. Histograms have
one writer and DNS latency one bucket table, in ``histograms.py``. Tests read the output
back with client_python's parser and ``promtool check metrics``.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from dnsfleet.nativehist import NativeSnapshot

MetricType = Literal["gauge", "counter", "histogram", "untyped"]

log = logging.getLogger(__name__)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _unicode(value: str) -> str:
    """``value`` as text every exposition can encode: a lone surrogate (JSON's ``"\\ud800"``
    decodes to one) becomes U+FFFD, where it failed the whole scrape's UTF-8 encoding."""
    if value.isascii():
        return value
    try:
        value.encode()
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    return value


class Labels:
    """An immutable, hashable label set: its (name, value) pairs in exposition order, and
    their text ``a="1",b="2"`` (no braces), rendered once when the set is made. Two sets are
    the same series when their texts are equal."""

    __slots__ = ("_hash", "pairs", "prefix", "text")

    pairs: tuple[tuple[str, str], ...]
    text: str
    prefix: str  # the text ahead of one more label: with its comma, if any
    _hash: int

    def __init__(self, pairs: Mapping[str, str] | Iterable[Sequence[str]] = ()) -> None:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        kept = tuple((str(k), _unicode(str(v))) for k, v in items)
        text = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in kept)
        prefix = text + "," if text else ""
        for name, value in (
            ("pairs", kept),
            ("text", text),
            ("prefix", prefix),
            ("_hash", hash(text)),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Labels are immutable: cannot set {name}")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Labels) and other.text == self.text

    def __lt__(self, other: Labels) -> bool:
        return self.text < other.text

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def __repr__(self) -> str:
        return f"Labels({{{self.text}}})"

    def with_(self, *pairs: tuple[str, str]) -> Labels:
        """These labels and more after them (``reason``, ``le``, ``code``)."""
        return Labels((*self.pairs, *pairs))


NO_LABELS = Labels()


def labelset(labels: Labels | Mapping[str, str] | Iterable[tuple[str, str]]) -> Labels:
    """Labels from a mapping or (name, value) pairs, in that order."""
    return labels if isinstance(labels, Labels) else Labels(labels)


def join_labels(*parts: Labels) -> Labels:
    return Labels(pair for part in parts for pair in part.pairs)


def format_value(value: float) -> str:
    if type(value) is float:
        # A finite float with a fraction (a duration, a sum of them) is its repr. One the
        # rule below writes otherwise has a repr ending in "0" (integral under 1e16: "2.0"),
        # "n" or "f" (NaN, infinities): those go the general way, as do others ("1e-10").
        text = float.__repr__(value)
        if text[-1] not in "0fn":
            return text
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def le_text(bound: float) -> str:
    """A bucket bound as Prometheus 3 spells ``le`` (it normalises classic histograms to
    this at scrape; client_python's floatToGoString writes the same): ``1.0``, ``0.005``,
    ``+Inf``. One spelling, so a rule can match ``le="1.0"`` exactly."""
    if math.isinf(bound):
        return "+Inf" if bound > 0 else "-Inf"
    return repr(float(bound))


Sample = tuple[str, Labels, float]  # (name suffix, labels, value)


@dataclass(slots=True)
class Family:
    """One metric family. ``name`` is the full sample name (counters end in ``_total``)."""

    name: str
    help: str
    type: MetricType = "gauge"
    samples: list[Sample] = field(default_factory=list)
    native: Mapping[str, NativeSnapshot] | None = None  # a histogram's, by label text

    def add(
        self, value: float, labels: Labels | Mapping[str, str] | None = None, *, suffix: str = ""
    ) -> Family:
        lab = NO_LABELS if not labels else labelset(labels)
        self.samples.append((suffix, lab, value))
        return self

    def add_raw(self, labels: Labels, value: float, suffix: str = "") -> None:
        """Add a sample whose :class:`Labels` were built beforehand (shared by a target's
        samples, so their text is rendered once)."""
        self.samples.append((suffix, labels, value))

    def value(self, labels: Mapping[str, str] | None = None, suffix: str = "") -> float | None:
        """Look a sample up (tests and derived metrics)."""
        want = NO_LABELS if not labels else labelset(labels)
        for s, lab, v in self.samples:
            if s == suffix and lab == want:
                return v
        return None


@dataclass(slots=True)
class TextFamily:
    """A family whose sample lines are already rendered. The per-target probe families of a
    1,000-target scrape use it: building 35,000 sample tuples first doubled peak memory.
    Its lines are written by one producer from typed records (proberecord.py), so its name
    is that producer's alone (see :func:`merge`). The producer may give what writes them
    instead: they are written when first read, so a protobuf scrape, which reads the
    family's ``proto`` writer alone, never writes text it does not send."""

    name: str
    help: str
    type: MetricType
    # complete sample lines or what returns them (:attr:`lines`), whole or in :meth:`parts`
    source: str | Callable[[], str | list[str]]
    # A histogram's native buckets by series label text (only protobuf carries them).
    native: Mapping[str, NativeSnapshot] | None = None
    # The family's Metric messages as protobuf, written by its producer from its typed
    # records (expoproto.py encodes the lines otherwise, parsing them back).
    proto: Callable[[], bytes] | None = None

    @property
    def lines(self) -> str:
        return "".join(self.parts())

    def parts(self) -> list[str]:
        """The lines in the pieces their producer wrote, which :func:`text_parts` sends
        unjoined: a large family whole is an mmap faulted in anew at every scrape (malloc.py)."""
        source = self.source
        got = source if isinstance(source, str) else source()
        return [got] if isinstance(got, str) else got

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
            append(f"{name}{suffix}{{{labels.text}}} {v}\n")
        else:
            append(f"{name}{suffix} {v}\n")
    return "".join(out)


def render(families: Iterable[Family | TextFamily]) -> str:
    return "".join(_render_one(f) for f in families if f.samples)


def text_parts(families: Iterable[Family | TextFamily]) -> Iterator[str]:
    """:func:`render`'s text piece by piece (a family's lines not copied behind its head)."""
    for f in families:
        if isinstance(f, TextFamily):
            if any(parts := f.parts()):
                yield _head(f)
                yield from parts
        elif f.samples:
            yield _render_one(f)


# Characters per slice in gzip_parts: under glibc's mmap threshold (malloc.py), so reused.
GZIP_SLICE = 64 * 1024


class Deflater(Protocol):
    def compress(self, data: bytes, /) -> bytes: ...
    def flush(self, mode: int = ..., /) -> bytes: ...


def _zlib_gzip(level: int) -> Deflater:
    return zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 16 + 15: a gzip header


try:
    # ISA-L's igzip (python-isal): a 1,000-target body (1.7 MB) in 0.7 ms of CPU where
    # zlib took 3 to 7 ms at level 1, and a smaller body; zlib-ng took 0.95 ms and a
    # larger one (bench/bench_render.py). Its levels are 0 to 3: 1 is zlib's 1 in kind.
    from isal import isal_zlib

    def _isal_gzip(level: int) -> Deflater:
        return isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31)

    gzip_compressor: Callable[[int], Deflater] = _isal_gzip
except ImportError:  # without python-isal (Debian 12 has none): zlib, as before
    gzip_compressor = _zlib_gzip


def gzip_parts(parts: Iterable[str], level: int = 1) -> bytes:
    """One gzip member of the UTF-8 of ``parts``, a slice at a time: the body built whole
    first (~4.4 MB at 1,000 targets, copied twice) cost more in page faults than in copies."""
    z = gzip_compressor(level)
    out = []
    for part in parts:
        for i in range(0, len(part), GZIP_SLICE):
            out.append(z.compress(part[i : i + GZIP_SLICE].encode()))
    out.append(z.flush())
    return b"".join(out)


def gzip_bytes(body: bytes, level: int = 1) -> bytes:
    """One gzip member of ``body`` (a protobuf exposition), by :func:`gzip_parts`' deflater."""
    z = gzip_compressor(level)
    return z.compress(body) + z.flush()


def render_bytes(families: Iterable[Family | TextFamily]) -> bytes:
    """:func:`render` encoded piece by piece: never one str and one bytes copy at once."""
    return b"".join([part.encode() for part in text_parts(families)])


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


def openmetrics_parts(families: Iterable[Family | TextFamily]) -> Iterator[str]:
    """The families in the OpenMetrics text format, piece by piece, ``# EOF`` last (what
    prometheus_client serves when Prometheus asks for application/openmetrics-text)."""
    for fam in families:
        if not fam.samples:
            continue
        text = _render_one(fam)
        body = text[text.index("\n", text.index("# TYPE")) + 1 :]
        yield _om_head(fam) + body
    yield "# EOF\n"


def render_openmetrics_bytes(families: Iterable[Family | TextFamily]) -> bytes:
    """:func:`openmetrics_parts` encoded (what prometheus_client serves OpenMetrics in)."""
    return b"".join([part.encode() for part in openmetrics_parts(families)])


class FamilyConflict(ValueError):
    """Two producers emit one family name with different types or help, or the same series
    (client_python's registry refuses a duplicated name in the same way)."""


def _log_conflict(conflict: FamilyConflict) -> None:
    log.error("exposition: %s; left out of this scrape", conflict)


def merge(
    families: Iterable[Family | TextFamily],
    on_conflict: Callable[[FamilyConflict], None] = _log_conflict,
) -> list[Family | TextFamily]:
    """Every family of a scrape, those of one name from several producers joined, in order
    of first appearance; the inputs are left alone. A conflict is that family's error, never
    the scrape's: a family whose name was seen with another type or help, or is written
    whole by a :class:`TextFamily`, is left out, and so is a sample whose series was
    already written; each is reported to ``on_conflict`` (logged by default)."""
    out: dict[str, Family | TextFamily] = {}
    seen: dict[str, set[tuple[str, Labels]]] = {}
    owned: set[str] = set()  # names whose Family this merge made (and may extend)
    for fam in families:
        name = fam.name
        have = out.get(name)
        if have is not None:
            why = _clash(have, fam)
            if why:
                on_conflict(FamilyConflict(f"family {name} {why}"))
                continue
        if isinstance(fam, TextFamily):
            out[name] = fam
            continue
        keys = seen.setdefault(name, set())
        unique = _unique(fam, keys, on_conflict)
        if have is None and len(unique) == len(fam.samples):
            out[name] = fam  # the common case: one producer, nothing copied
        elif isinstance(have, Family) and name in owned:
            have.samples.extend(unique)
        else:
            before = have.samples if isinstance(have, Family) else []
            out[name] = Family(name, fam.help, fam.type, [*before, *unique])
            owned.add(name)
    return list(out.values())


def _clash(have: Family | TextFamily, fam: Family | TextFamily) -> str:
    """Why ``fam`` cannot join ``have`` of the same name, or ``""``."""
    if (have.type, have.help) != (fam.type, fam.help):
        return f"emitted as {have.type} ({have.help!r}) and as {fam.type} ({fam.help!r})"
    if isinstance(have, TextFamily) or isinstance(fam, TextFamily):
        return "emitted twice, once written whole by one producer"
    return ""


def _unique(
    fam: Family, keys: set[tuple[str, Labels]], on_conflict: Callable[[FamilyConflict], None]
) -> list[Sample]:
    """The samples of ``fam`` whose series are not in ``keys`` yet (added to it)."""
    out: list[Sample] = []
    for sample in fam.samples:
        key = (sample[0], sample[1])
        if key in keys:
            on_conflict(FamilyConflict(f"duplicated series {fam.name}{key[0]}{{{key[1].text}}}"))
            continue
        keys.add(key)
        out.append(sample)
    return out


def compile_template(
    name: str, params: str, text: str, *, each: str = "", unless: tuple[str, str] | None = None
) -> Callable[..., str]:
    """A function that returns ``text`` as an f-string over ``params``. CPython builds an
    f-string in one step, where str.format parses its template on every call: the 16-line
    histogram block of a target renders 2.5 times faster so. ``text`` is made of constants
    (metric names, bucket bounds, reason names); labels and values come in as arguments,
    never as code. ``each`` (a comprehension's ``target in iterable``, a constant too): a
    list of it for each, no call per item; ``unless``: (a condition, the text if false)."""
    line = f"f{text!r}" if unless is None else f"f{text!r} if {unless[0]} else f{unless[1]!r}"
    namespace: dict[str, Callable[..., str]] = {}
    body = f"[{line} for {each}]" if each else line
    exec(f"def {name}({params}):\n    return {body}\n", namespace)
    return namespace[name]
