"""/proc/<pid>/stat and /proc/<pid>/task/<tid>/stat (proc(5))."""

from __future__ import annotations

# Field 39 ("processor", the CPU last executed on), 1-based in proc(5). Fields after the
# comm's closing parenthesis start at field 3.
PROCESSOR_FIELD = 39
_AFTER_COMM = 3


def parse_stat_processor(text: str) -> int:
    """The CPU a task last ran on. The comm (field 2) may contain spaces and parentheses,
    so split after the *last* ``)``."""
    end = text.rfind(")")
    if end < 0:
        raise ValueError("stat: no ')' after comm")
    fields = text[end + 1 :].split()
    idx = PROCESSOR_FIELD - _AFTER_COMM
    if len(fields) <= idx or not fields[idx].isdigit():
        raise ValueError(f"stat: no processor field (have {len(fields) + 2} fields)")
    return int(fields[idx])
