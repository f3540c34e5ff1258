"""/proc/interrupts, /proc/softirqs and kernel CPU lists.

Layouts (kernel ``fs/proc/interrupts.c`` -> ``show_interrupts()``, ``fs/proc/softirqs.c``):

- The header names the *online* CPUs (``CPU0 CPU2`` when CPU1 is offline): count columns map
  to those numbers, not to positions.
- Numbered IRQ lines: ``<irq>: <count per CPU> <chip> <hwirq> <edge|level> <actions>``. The
  action names are last; a shared line lists several joined by ``", "``.
- Architecture lines (``NMI``, ``LOC``, ``IPI0``...) carry counts and a description; ``ERR``
  and ``MIS`` carry a single count.
- aarch64 prints IPI labels with ``%*s%u:`` and no padding once the label is wide enough, so
  the first count is glued to the colon (``IPI0:2768808080 2844211768``). Split on ``:``
  before splitting on white space.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IrqLine:
    irq: str  # "58", "IPI0", "NMI"
    counts: tuple[int, ...]  # per CPU column; () when the caller did not ask for them
    description: str  # what follows the counts: chip, hwirq, trigger, actions
    actions: str  # action names (device names), "" on architecture lines

    @property
    def total(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True, slots=True)
class Interrupts:
    cpus: tuple[int, ...]  # CPU numbers of the count columns
    lines: tuple[IrqLine, ...]

    def by_irq(self) -> dict[str, IrqLine]:
        return {line.irq: line for line in self.lines}


def _header_cpus(header: str, what: str) -> tuple[int, ...]:
    cpus = []
    for tok in header.split():
        if not tok.startswith("CPU") or not tok[3:].isdigit():
            raise ValueError(f"{what}: header token {tok!r} is not CPUn")
        cpus.append(int(tok[3:]))
    if not cpus:
        raise ValueError(f"{what}: header names no CPU")
    return tuple(cpus)


def parse_interrupts(text: str, *, counts_for: Container[str] | None = None) -> Interrupts:
    """Parse /proc/interrupts. With ``counts_for``, per-CPU counts are converted (and
    checked) only for the IRQs it contains; the others get ``counts=()`` and only their
    action names. On a 128-CPU host that is the difference between ~44,000 and a few
    thousand integer conversions per scrape."""
    rows = text.splitlines()
    if not rows:
        raise ValueError("/proc/interrupts: empty")
    cpus = _header_cpus(rows[0], "/proc/interrupts")
    ncpu = len(cpus)
    lines: list[IrqLine] = []
    for lineno, row in enumerate(rows[1:], start=2):
        label, sep, rest = row.partition(":")
        irq = label.strip()
        if not sep or not irq or " " in irq:
            if not row.strip():
                continue
            raise ValueError(f"/proc/interrupts: line {lineno}: no IRQ label: {row[:60]!r}")
        numbered = irq.isdigit()
        want = counts_for is None or irq in counts_for
        if not want:
            # Only the action names: the last few fields, without splitting every count.
            lines.append(IrqLine(irq, (), "", _actions(rest.rsplit(None, 4)) if numbered else ""))
            continue
        fields = rest.split(None, ncpu)
        if numbered:
            n = ncpu
            try:
                if len(fields) < ncpu:
                    raise ValueError
                counts = tuple(map(int, fields[:ncpu]))
            except ValueError:
                raise ValueError(
                    f"/proc/interrupts: line {lineno}: IRQ {irq} does not have {ncpu} counts"
                ) from None
        else:
            n = 0
            while n < ncpu and n < len(fields) and fields[n].isdigit():
                n += 1
            counts = tuple(map(int, fields[:n]))
        description = (
            fields[ncpu]
            if numbered and len(fields) > ncpu
            else (" ".join(fields[n:]) if not numbered else "")
        )
        actions = _actions(description.split()) if numbered and description else ""
        lines.append(IrqLine(irq, counts, description, actions))
    return Interrupts(cpus=cpus, lines=tuple(lines))


def _actions(parts: list[str]) -> str:
    """The action column from the trailing fields of a line; shared IRQs join several
    actions with ", " (``kernel/irq/proc.c``)."""
    if not parts:
        return ""
    actions = parts[-1]
    i = len(parts) - 2
    while i >= 0 and parts[i].endswith(","):
        actions = parts[i] + " " + actions
        i -= 1
    return actions


@dataclass(frozen=True, slots=True)
class Softirqs:
    cpus: tuple[int, ...]
    counts: dict[str, tuple[int, ...]]  # "NET_RX" -> per CPU column


def parse_softirqs(text: str, *, only: Container[str] | None = None) -> Softirqs:
    rows = text.splitlines()
    if not rows:
        raise ValueError("/proc/softirqs: empty")
    cpus = _header_cpus(rows[0], "/proc/softirqs")
    counts: dict[str, tuple[int, ...]] = {}
    for lineno, row in enumerate(rows[1:], start=2):
        name, sep, rest = row.partition(":")
        name = name.strip()
        if not row.strip():
            continue
        if not sep or not name:
            raise ValueError(f"/proc/softirqs: line {lineno}: no softirq name: {row[:60]!r}")
        if only is not None and name not in only:
            continue
        fields = rest.split()
        if len(fields) != len(cpus) or not all(f.isdigit() for f in fields):
            raise ValueError(
                f"/proc/softirqs: line {lineno}: {name} does not have {len(cpus)} counts"
            )
        counts[name] = tuple(map(int, fields))
    return Softirqs(cpus=cpus, counts=counts)


def parse_cpu_list(text: str) -> frozenset[int]:
    """A kernel CPU list (``bitmap_parselist`` format): ``0-3,8,10-11``, ``0-15:2`` (stride,
    ``lib/bitmap.c``), or empty. Raises ValueError on anything else."""
    out: set[int] = set()
    text = text.strip()
    if not text:
        return frozenset()
    for raw in text.split(","):
        rng, _, stride_s = raw.strip().partition(":")
        lo_s, dash, hi_s = rng.partition("-")
        if not lo_s.isdigit() or (dash and not hi_s.isdigit()):
            raise ValueError(f"invalid CPU list {text[:60]!r}")
        lo = int(lo_s)
        hi = int(hi_s) if dash else lo
        if stride_s:
            used, _, group = stride_s.partition("/")
            if not used.isdigit() or not group.isdigit() or int(group) == 0:
                raise ValueError(f"invalid CPU list {text[:60]!r}")
            # "a-b:used/group": the first `used` CPUs of every `group`.
            out.update(c for c in range(lo, hi + 1) if (c - lo) % int(group) < int(used))
            continue
        if hi < lo or hi - lo > 1 << 16:
            raise ValueError(f"invalid CPU list {text[:60]!r}")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def parse_per_cpu_count(
    text: str, *, possible: tuple[int, ...], online: tuple[int, ...]
) -> tuple[int, ...] | None:
    """/sys/kernel/irq/<irq>/per_cpu_count (Linux 4.17+): the IRQ's count on every
    *possible* CPU in order, joined by ``,`` (``per_cpu_count_show`` in kernel/irq/irqdesc.c).
    Returns the counts of the ``online`` CPUs, in that order: the columns /proc/interrupts
    shows (``for_each_online_cpu``). None when the file does not hold one count per possible
    CPU: the kernel cuts it at a page (a few hundred CPUs of ten-digit counts). A cut inside
    the last count leaves as many fields, the last one short: the newline the kernel writes
    after the counts is what shows the file whole."""
    if not text.endswith("\n"):
        return None
    fields = text.strip().split(",")
    if len(fields) != len(possible) or not all(f.isdigit() for f in fields):
        return None
    by_cpu = dict(zip(possible, fields, strict=True))
    try:
        return tuple(int(by_cpu[c]) for c in online)
    except KeyError:
        return None  # an online CPU that is not possible: not this kernel's file
